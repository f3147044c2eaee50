// parallel/zero.hpp — the ZeRO engine: who holds which part of the parameters and gradients, and
// the collectives that move them (Rajbhandari et al. 2020, "ZeRO"; docs/design.md "ZeRO").
//
// A rank belongs to a ZeRO group of N ranks (Comm `zero`) and a replica group of R ranks (Comm
// `replicas`: the ranks of the other ZeRO groups holding the same shard). Its shard is chunk z of
// every unit (ParamLayout::shard), stored back to back ("shard-local"). Per stage:
//   stage 0  full params and grads; the "shard" is the whole buffer (N = 1): plain data parallelism.
//   stage 1  full params and grads; at the step, per unit, grads reduce-scattered into the shard.
//   stage 2  full params; each unit's gradient is reduce-scattered as soon as its backward is done,
//            from one of two working buffers (the embeddings have their own), and added into the
//            shard; no full gradient buffer.
//   stage 3  as 2, and params sharded too: a unit is gathered into a working buffer (embeddings:
//            their own; layers and ln_f: two, the next one prefetched while the current computes)
//            before use, and dropped at release; the embeddings stay gathered until the step.
// Then, at every stage: the shard is all-reduced across replicas (sub-DP), AdamW updates the
// shard (the trainer calls it with param_shard()/grad_shard()), and gather_params() all-gathers the
// updated params inside the ZeRO group (stages 1 and 2). Every collective sums in rank order on
// MpiComm, so ZeRO-1 and ZeRO-2/3 at one micro-batch reproduce plain DP's bits (docs/distributed.md).
#pragma once
#include <array>
#include <functional>
#include <vector>

#include "model/param_store.hpp"
#include "parallel/comm.hpp"
#include "parallel/host_wait.hpp"

namespace llmtrain {

struct ZeroOptions {
    int stage = 0;                   ///< parallel.zero_stage, 0..3
    DType reduce_dtype = DType::f32; ///< parallel.grad_reduce_dtype: gradients on the wire
    /// The units this rank's pipeline stage holds, ascending (empty: every unit). Stages 0 and 1
    /// only: the full params and grads buffers then hold just these units, back to back.
    std::vector<int> units;
    /// When reduce_dtype differs from the act dtype, gradients are cast and reduced in pieces of
    /// p = reduce_piece_bytes / (N x its size) elements of every rank's chunk: the cast buffers are
    /// N + 1 pieces (at most reduce_piece_bytes + a piece), where a whole unit and a chunk would be
    /// 614 MiB for GPT-2 1.5B's wte in fp32. Each reduce-scatter then moves reduce_piece_bytes per
    /// call, each replica all-reduce p elements. Sums are per element in rank order, so the pieces
    /// change no bit. Tests set it small to cut chunks into several pieces.
    size_t reduce_piece_bytes = size_t(64) << 20;
};

class ZeroEngine final : public ParamStore {
public:
    /// Allocates this rank's buffers through `alloc` (params/grads: what the stage keeps; comm: working
    /// buffers). `layout` must split over zero.size() (shard_multiple a multiple of it) and outlive the
    /// engine, as must both Comms. Stage 0 needs zero.size() == 1; a unit list needs stage 0 or 1.
    /// Errors: std::invalid_argument.
    ZeroEngine(Allocator& alloc, const ParamLayout& layout, Comm& zero, Comm& replicas, const ZeroOptions& opt);
    ~ZeroEngine() override;
    ZeroEngine(const ZeroEngine&) = delete;
    ZeroEngine& operator=(const ZeroEngine&) = delete;

    int stage() const { return opt_.stage; }
    const ParamLayout& layout() const { return layout_; }
    DType act_dtype() const { return ops_.act_dtype(); }  ///< the params' and grads' dtype
    /// This rank's ranges of the flat buffer (its chunk of every unit it holds), in shard-local order.
    const std::vector<FlatRange>& shard() const { return ranges_; }
    /// Whether this rank's stage holds unit u.
    bool holds(int u) const { return held_[size_t(u)]; }
    size_t shard_numel() const { return shard_numel_; }
    /// (shard_numel) act dtype: the params this rank updates (the only copy at stage 3).
    void* param_shard() { return pshard_; }
    /// (shard_numel) act dtype: the gradient summed over every dp rank, after reduce_grads().
    void* grad_shard() { return gshard_; }
    /// Tensor parallelism: the elements of this rank's shard that hold the layout's tensors split
    /// over the TP group (`split`), or its replicated ones (!split), as shard-local ranges (offsets
    /// into param_shard()/grad_shard(), in elements), adjacent ones merged, in flat order; units
    /// the stage does not hold and, with skip_embeddings, unit 0 left out. The same ranges on every
    /// TP rank of one ZeRO index (their layouts differ only in which slice they hold).
    std::vector<FlatRange> shard_pieces(bool split, bool skip_embeddings = false) const;
    /// The same for any selection: the shard-local ranges of this rank's shard that hold the
    /// tensors `keep` accepts (units the stage holds), adjacent ones merged, in flat order. Expert
    /// parallelism's dense and expert tensors (parallel/ep_grads.hpp).
    std::vector<FlatRange> shard_pieces_where(const std::function<bool(const ParamTensor&)>& keep) const;

    /// Zeroes the gradients for a new optimizer step.
    void begin_step();
    /// Completes the reduction of the step's gradients: pending reduce-scatters (stages 2, 3), the
    /// per-unit reduce-scatter of the full grads (stage 1), then the all-reduce across replicas.
    void reduce_grads();
    /// parallel.overlap_grad_reduce: `on` says the next backward is the step's last one. Stages 0 and
    /// 1 then start each unit's reduction (the replica all-reduce at stage 0, the ZeRO group's
    /// reduce-scatter at stage 1) as soon as its gradient is complete (grads_done), nudging the ones
    /// in flight at every later unit, and reduce_grads() only waits for them, in the order started
    /// (PyTorch DDP's buckets, a unit each). Sums are per element in rank order either way: the same
    /// bits. No effect at stages 2-3 (they always do so), with a reduce dtype other than the act
    /// dtype, or with nothing to reduce.
    void reduce_during_backward(bool on);
    /// Sum over every dp rank of the squared reduced gradient (collective over the ZeRO group, then,
    /// with sub-DP, a broadcast from replica 0 over the replica group: bitwise the same on every dp rank;
    /// scratch: one device fp32), without unit 0 when skip_embeddings (the pipeline's last stage:
    /// the first stage counts the tied embeddings). The host waits for the current stream only,
    /// under parallel.timeout_s (HostWait), so a hung gradient reduction ends in CommError
    /// "reading the gradient norm: timed out ...; zero group (...); replica group (...)".
    /// skip_replicated (tensor parallelism, TP ranks other than 0): only the tensors the layout splits
    /// over the TP group are counted, so that the replicated ones (LayerNorms, wpe, row-parallel
    /// biases; equal on every TP rank) enter the TP group's sum once; summed range by range, each
    /// tensor's part of the shard in flat order (a fixed order: the same bits on every replica).
    float grad_norm_squared(float* scratch, bool skip_embeddings = false, bool skip_replicated = false);
    /// The same sum over the given shard-local pieces of the reduced gradient only (ranges into
    /// grad_shard(), in elements; e.g. shard_pieces_where's): squares summed piece by piece in the
    /// given order, then over the ZeRO group (and replica 0's taken by every replica), read to the
    /// host under the same timed wait. Collective over the ZeRO and replica groups.
    float pieces_norm_squared(float* scratch, const std::vector<FlatRange>& pieces);
    /// After the optimizer wrote param_shard(): all-gathers it into the full params (stages 1, 2);
    /// marks gathered copies stale (stage 3).
    void gather_params();

    // ---- ParamStore ----
    const void* acquire_params(int u, int next) override;
    void release_params(int u) override;
    void* acquire_grads(int u) override;
    void grads_done(int u) override;
    void load_params(const float* host) override;
    std::vector<FlatRange> own_ranges() const override { return ranges_; }
    void load_shard(const float* values) override;
    /// Timed (HostWait's poll and watchdog) against the ZeRO and replica groups.
    void host_wait(Ops& ops, Event e, const char* what) override;

private:
    /// A full-unit working buffer: a gathered unit (stage 3) or a unit's gradient (stages 2, 3).
    struct Slot {
        void* buf = nullptr;   // (units()[u].numel) act dtype
        void* tmp = nullptr;   // gradient slots: (chunk) act dtype, the reduce-scatter result
        int unit = -1;         // what it holds (or is receiving)
        bool in_use = false;   // acquired and not yet released / grads_done
        CommHandle pending;    // gather or reduce-scatter in flight
    };
    Slot& param_slot_for(int u, int avoid);
    void start_gather(Slot& s, int u);
    void start_reduce(Slot& s);
    void finish_reduce(Slot& s);
    void reduce_scatter_wire(const void* src, void* dst, int u);
    /// scratch (one device fp32, this rank's squares) summed over the ZeRO group, replica 0's sum
    /// broadcast to the replicas, read to the host (timed).
    float finish_norm(float* scratch);
    size_t chunk(int u) const;
    char* full_at(void* base, int u) const;  // unit u in params_ / grads_
    char* shard_at(void* base, int u) const;  // unit u's chunk of a shard-local act-dtype buffer
    void* alloc_cat(MemCategory c, size_t bytes);
    /// Host fp32 -> device act dtype: `n` elements from src into dst, for each part.
    struct Upload {
        void* dst;
        const float* src;
        size_t n;
    };
    /// Queues every part (through an fp32 staging buffer when casting), then the timed host wait (`what`).
    void upload(const std::vector<Upload>& parts, const char* what);

    Allocator& alloc_;
    Ops& ops_;
    const ParamLayout& layout_;
    Comm& zero_;
    Comm& replicas_;
    ZeroOptions opt_;
    size_t es_, wire_es_;
    int N_;
    std::vector<FlatRange> shard_;   // per unit: this rank's chunk (numel 0 for units it does not hold)
    std::vector<FlatRange> ranges_;  // the non-empty ones
    std::vector<bool> held_;         // per unit: held by this rank's stage
    std::vector<size_t> local_off_;  // per unit: its chunk's offset in the shard-local buffers
    std::vector<size_t> full_off_;   // per unit: its offset in params_ / grads_ (units held, back to back)
    size_t full_numel_ = 0;          // elements of params_ / grads_
    size_t shard_numel_ = 0;

    void* params_ = nullptr;   // full params (stages 0-2)
    void* grads_ = nullptr;    // full grads (stages 0-1)
    void* pshard_ = nullptr;   // shard-local params (aliases params_ at stage 0)
    void* gshard_ = nullptr;   // shard-local grads (aliases grads_ at stage 0)
    Slot pemb_;                // stage 3: the gathered embeddings
    std::array<Slot, 2> pslots_;  // stage 3: gathered layers / ln_f
    Slot gemb_;                // stages 2-3: the embeddings' gradient
    std::array<Slot, 2> gslots_;  // stages 2-3: layer / ln_f gradients
    int next_gslot_ = 0;
    std::vector<Slot*> reduce_order_;  // slots with a reduce in flight, in the order started
    bool early_ = false;               // reduce_during_backward(true): stages 0-1 start per unit
    std::vector<CommHandle> early_ops_;  // those reductions, in the order started
    std::vector<bool> early_unit_;     // per unit: its reduction was started in the backward
    size_t piece_ = 0;           // elements per rank's piece of a cast reduction (reduce_piece_bytes)
    void* wire_send_ = nullptr;  // (N x piece_) reduce dtype: every rank's part of a piece, rank order
    void* wire_recv_ = nullptr;  // (piece_) reduce dtype; non-null: gradients travel in reduce dtype
    std::vector<void*> owned_;
    HostWait host_wait_;         // the engine's host waits, timed against zero_ and replicas_
    float* norm_host_ = nullptr; // (1) pinned: the gradient norm's landing place
};

}  // namespace llmtrain
