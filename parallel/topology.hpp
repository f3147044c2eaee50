// parallel/topology.hpp — a rank's coordinates and groups (docs/design.md "Ranks and groups").
//
// world = pp × dp × tp, dp = replicas × zero_group_size. Rank order, fastest first: index in the
// tensor-parallel group (t), index in the ZeRO group (z), replica (r), pipeline stage (s):
//   world_rank = t + tp·(z + zero_group_size·(r + replicas·s)).
// A TP group is tp consecutive ranks, so it stays inside a node. World 4, pp 1, tp 1,
// zero_group_size 2: ZeRO groups [0,1] and [2,3], replica groups (0,2) and (1,3). The ZeRO,
// replica, dp and stage groups hold ranks of one TP index (each TP rank's parameters are its own).
// The data-parallel index (what the loader shards by) is z + zero_group_size·r, the same order.
// Context parallelism (parallel.cp, docs/parallelism.md "Context parallelism") lives inside dp: the
// cp consecutive dp indices data·cp .. data·cp + cp − 1 hold the same windows, each its share of the
// sequence, so dp here counts data-parallel ranks × cp (the ranks a gradient is averaged over, as
// Megatron-LM's dp-cp group) and the loader shards by data_index() = dp_index / cp.
// Nothing else in llmtrain does rank arithmetic: it asks a Topology.
#pragma once
#include <string>
#include <vector>

namespace llmtrain {

class Topology {
public:
    /// world = pp · dp · tp; zero_group_size in [1, dp] dividing dp (0 means dp); cp dividing dp.
    /// Errors: std::invalid_argument naming parallel.zero_group_size, parallel.pp, parallel.tp or
    /// parallel.cp and what was expected.
    Topology(int world_size, int world_rank, int pp, int zero_group_size, int tp = 1, int cp = 1);

    int world_size() const { return world_; }
    int world_rank() const { return rank_; }
    int pp() const { return pp_; }
    int dp() const { return dp_; }
    int tp() const { return tp_; }
    int cp() const { return cp_; }                            ///< context-parallel ranks per window
    int data_parallel() const { return dp_ / cp_; }           ///< replicas of the data stream: dp / cp
    int zero_group_size() const { return zg_; }
    int replicas() const { return dp_ / zg_; }

    int stage() const { return rank_ / (dp_ * tp_); }        ///< pipeline stage s
    int dp_index() const { return (rank_ / tp_) % dp_; }     ///< index among this stage's dp ranks
    int zero_index() const { return (rank_ / tp_) % zg_; }   ///< index in the ZeRO group
    int replica() const { return dp_index() / zg_; }        ///< which ZeRO group (replica) of the stage
    int tp_index() const { return rank_ % tp_; }             ///< index in the tensor-parallel group
    int cp_index() const { return dp_index() % cp_; }        ///< index in the context-parallel group
    int data_index() const { return dp_index() / cp_; }      ///< which data shard: [0, data_parallel())

    /// World ranks of this rank's ZeRO group (same stage, replica and TP index), in ZeRO-index order.
    std::vector<int> zero_group() const;
    /// World ranks holding the same shard in the other replicas (same stage, ZeRO and TP index), by replica.
    std::vector<int> replica_group() const;
    /// The dp ranks of this stage with this TP index, in dp-index order.
    std::vector<int> dp_group() const;
    /// This rank's pipeline: the ranks of the same replica, ZeRO and TP index at every stage, by stage.
    std::vector<int> stage_group() const;
    /// This rank's tensor-parallel group: the tp consecutive ranks of its (stage, replica, ZeRO
    /// index), in TP-index order.
    std::vector<int> tp_group() const;
    /// This rank's context-parallel group: the cp ranks of its stage and TP index whose dp indices
    /// are data_index()·cp .. + cp − 1, in CP-index order.
    std::vector<int> cp_group() const;
    /// This rank's expert-parallel group for parallel.ep = ep (docs/parallelism.md "Expert
    /// parallelism"): the ep ranks of its stage and TP index whose dp indices are
    /// dp_index()/ep·ep .. + ep − 1, in dp-index order (ep is carved out of dp, as cp is; each holds
    /// its own data). Errors: std::invalid_argument naming parallel.ep unless ep >= 1 divides dp.
    std::vector<int> ep_group(int ep) const;
    /// World rank of coordinates (stage, replica, ZeRO index, TP index).
    int rank_of(int stage, int replica, int zero_index, int tp_index = 0) const;

    /// "world 4 = pp 1 x dp 4 (2 replicas x zero_group_size 2); ZeRO groups [0,1] [2,3]; replica groups (0,2) (1,3)";
    /// with tp > 1, "world 8 = pp 1 x dp 2 x tp 4 (...)" and the groups of TP index 0 followed by
    /// "; TP groups {0,1,2,3} {4,5,6,7}".
    std::string describe() const;

private:
    int world_, rank_, pp_, dp_, zg_, tp_, cp_;
};

}  // namespace llmtrain
