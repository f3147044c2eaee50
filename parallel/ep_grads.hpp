// parallel/ep_grads.hpp — expert parallelism's parameter groups and gradient sums (docs/parallelism.md
// "Expert parallelism"), Megatron-LM's "expert data parallelism".
//
// With parallel.ep = P each rank's layout holds the dense tensors whole and only its EP index's E/P
// experts of every routed-expert tensor (ParamLayout ep, ep_rank; the same sizes and offsets on every
// EP rank). The dp ranks with the same EP index (dp index mod P) hold the same experts: the
// expert-data-parallel group, dp/P ranks. The ZeRO engine runs over it (its ZeRO and replica groups
// are ranks of one EP index), so ZeRO-1/2/3 shard the experts over the ranks that hold them and the
// engine's reduction sums every gradient over the dp/P ranks of one EP index. The dense tensors'
// parts of the grad shard then get one all-reduce over the EP group (the same shard-local ranges on
// every EP rank), which completes their sum over all dp ranks; the experts' sum is complete as it is.
//
//   dp index d = P·e' + e   (e = d mod P: the EP index; e' = d / P: the index among its experts' holders)
//   ZeRO group of the engine: Ne = 1 at ZeRO stage 0, else zero_group_size / P ranks of one EP index,
//   engine ZeRO index e' mod Ne, replica e' / Ne.
#pragma once
#include <memory>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/topology.hpp"
#include "parallel/zero.hpp"

namespace llmtrain {

/// The groups of one rank at parallel.ep = P > 1 (world ranks, in group order).
struct ExpertDp {
    int ep = 1;                      ///< P
    int ep_index = 0;                ///< dp index mod P: which E/P experts this rank holds
    int zero_size = 1;               ///< Ne, the engine's ZeRO group size
    std::vector<int> zero_group;     ///< the engine's ZeRO group: Ne ranks of this EP index
    std::vector<int> replica_group;  ///< the engine's replica group: the same shard in the other replicas
    /// Checkpoint writers: the ranks of dp indices [0, P x Ne) (each with its tp TP ranks), together
    /// one copy of every shard: writers = P x Ne x tp, writer dp index x tp + TP index (dp index d:
    /// EP index d mod P, engine ZeRO index d / P); this rank's writer index, or -1.
    int writers = 1, writer = -1;
};

/// The expert-dp groups of topo's rank at parallel.ep = ep, among the dp ranks of its pipeline stage
/// and TP index (each stage and TP index has its own groups; the writers are per stage too). With
/// cp the dp indices include the CP ranks, so an ep group may hold a window's ranks.
/// Errors: std::invalid_argument naming parallel.ep when ep < 2 or does not divide dp; naming
/// parallel.zero_group_size when the topology's ZeRO group (> 1) is not a multiple of ep (its
/// ranks of one EP index would not be equally many).
ExpertDp expert_dp_of(const Topology& topo, int ep);

/// The gradient sums and norm of an expert-parallel rank, over its ZeRO engine (built over
/// ExpertDp's groups with a layout at ep > 1).
class EpGrads {
public:
    /// ep_comm: the EP group over device buffers (its rank order the EP index; EpGroup::comm());
    /// ep_host: the same ranks over host buffers (owned). Both must outlive nothing more than this.
    /// norm_skips_embeddings: the norm leaves unit 0 out (a pipeline's last stage: its tied wte is
    /// the first stage's copy, counted there; docs/parallelism.md "Pipeline parallelism").
    /// Errors: std::invalid_argument if the engine's layout is not one of ep_comm.size() EP ranks.
    EpGrads(ZeroEngine& engine, Comm& ep_comm, std::unique_ptr<Comm> ep_host, ExpertDp groups,
            bool norm_skips_embeddings = false);
    const ExpertDp& groups() const { return groups_; }
    /// The shard-local ranges of the engine's grad shard holding dense tensors / expert tensors.
    const std::vector<FlatRange>& dense_pieces() const { return dense_; }
    const std::vector<FlatRange>& expert_pieces() const { return expert_; }
    /// After ZeroEngine::reduce_grads (which summed every gradient over the dp/P ranks of this EP
    /// index): all-reduces the dense pieces of the grad shard over the EP group, in the act dtype,
    /// so they hold the sum over all dp ranks (bitwise the same on every EP rank: MpiComm sums in
    /// rank order). Collective over the EP group.
    void reduce();
    /// The squared norm of the stage's reduced gradient: the dense pieces' squares once (every
    /// EP rank holds the same; unit 0 left out with norm_skips_embeddings), plus the expert pieces'
    /// squares summed over the EP group (one host float), the same bits on every dp rank. At a TP
    /// index other than 0 the replicated tensors (the experts among them) are left out: TP index 0
    /// counts them before the TP group's sum. scratch: one device fp32. Collective over the engine's
    /// groups and the EP group.
    float norm_squared(float* scratch);

private:
    ZeroEngine& engine_;
    Comm& ep_;
    std::unique_ptr<Comm> ep_host_;
    ExpertDp groups_;
    std::vector<FlatRange> dense_, expert_;
    std::vector<FlatRange> dense_norm_;   // dense_ without unit 0 where the norm skips it, without the
                                          // replicated tensors at a TP index other than 0
    std::vector<FlatRange> expert_norm_;  // expert_ at TP index 0, else empty (replicated over tp)
};

}  // namespace llmtrain
