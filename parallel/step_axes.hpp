// parallel/step_axes.hpp — the parallelisms of one optimizer step, each with an owner
// (docs/design.md "Parallelisms with owners"; torchtitan's parallelize gives each model one such
// place). The data-parallel axis (with ZeRO, its ZeroEngine) is the step's spine: it begins the
// step, reduces the gradients over the dp ranks, takes the local squared norm, averages the loss
// over the world and gathers the updated params. Every other parallelism is a StepAxis saying what
// it adds to that: its share of a window (the loss mean's positions), whether this rank's loss
// counts, its gradient sync before and after the dp reduction, what the local norm leaves out and
// its sum of the norm over its ranks, and which units this rank's checkpoint part writes.
//
// The order is the step's protocol: StepAxes calls the axes in the order they were added, at each
// phase (every rank alike: their collectives must pair up, and the norm's float sums associate in
// that order). The trainer adds them as ep, tp, pp, cp (app/trainer_setup.cpp step_axes_of): the
// pipeline's tied embedding sum comes before the dp reduction, expert parallelism's dense sum and
// TP's replicated broadcast after it, the norm summed over the TP group first, then over the
// pipeline's stages — the order the step had before the axes were owned, so its bits are unchanged.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/ep_grads.hpp"
#include "parallel/tp_group.hpp"
#include "parallel/zero.hpp"

namespace llmtrain {

/// What this rank's local squared gradient norm leaves out because another rank of an axis counts it.
struct NormSkips {
    bool embeddings = false;  ///< unit 0: the pipeline's last stage (its tied wte is the first stage's)
    bool replicated = false;  ///< tensors replicated over the TP group: TP index > 0 (index 0 counts them)
};

/// One parallelism's part of a step beside the data-parallel reduction. Defaults: nothing.
class StepAxis {
public:
    virtual ~StepAxis() = default;
    /// "tp", "pp", "cp": messages and tests.
    virtual const char* name() const = 0;
    /// This rank computes T / window_split() positions of each window (context parallelism: its share).
    virtual int window_split() const { return 1; }
    /// Whether this rank's loss enters the dp mean; false where a peer of the axis holds the same value.
    virtual bool counts_loss() const { return true; }
    /// Gradient sync before the dp reduction (the reduced gradients are not there yet).
    virtual void before_reduce() {}
    /// Gradient sync after the dp reduction (on the grad shard, the sum over the dp ranks).
    virtual void after_reduce() {}
    /// Marks what the local squared norm leaves out on this rank.
    virtual void norm_skips(NormSkips&) const {}
    /// Computes this rank's local squared norm itself into sq and returns true (an axis whose
    /// tensors the engine's sum cannot count alone: expert parallelism's dense tensors once, its
    /// experts over the EP group), or returns false: the engine's sum, without the skips, is it.
    virtual bool local_norm_squared(float* /*scratch*/, float* /*sq*/) { return false; }
    /// Adds the other ranks' squared norms of this axis to `sq` (host fp32, the same on every rank after).
    virtual void sum_norm(float*) {}
    /// Whether this rank's checkpoint part writes unit u (false: a copy another rank writes).
    virtual bool saves_unit(int) const { return true; }
};

/// Tensor parallelism (parallel.tp > 1, docs/distributed.md "Tensor parallelism"): TP index 0's loss
/// counts (every TP rank holds the same); after the dp reduction the replicated tensors' gradients
/// (LayerNorms, wpe, row-parallel biases) go from TP index 0 to the group; the local norm leaves them
/// out on the other TP ranks, and the squares are summed over the group on host buffers.
class TensorParallelAxis final : public StepAxis {
public:
    /// engine: this rank's ZeRO engine; group: the TP group (device buffers); host: the same ranks over
    /// host buffers; act: the gradients' dtype; sync_replicated: whether a sum over other ranks (dp > 1,
    /// or the pipeline's tied-embedding pair) can make the replicated gradients differ. All outlive it.
    TensorParallelAxis(ZeroEngine& engine, TpGroup& group, Comm& host, DType act, bool sync_replicated);
    const char* name() const override { return "tp"; }
    bool counts_loss() const override { return group_.rank() == 0; }
    /// Broadcasts the replicated pieces of the grad shard from TP index 0 (about 3 per layer). Each TP
    /// index reduces over its own ZeRO/replica communicators, which real NCCL need not sum alike: one
    /// unit in the last place would let the copies drift (cuda_emu_tp shows it with CUDA_EMU_NCCL_PERTURB).
    void after_reduce() override;
    void norm_skips(NormSkips& s) const override { s.replicated = s.replicated || group_.rank() != 0; }
    void sum_norm(float* sq) override { host_.all_reduce_sum(sq, 1, DType::f32); }

private:
    ZeroEngine& engine_;
    TpGroup& group_;
    Comm& host_;
    const DType act_;
    const bool sync_;
};

/// Pipeline parallelism (parallel.pp > 1, docs/distributed.md "Pipeline"): the tied wte's gradient
/// summed over its two copies (first and last stage, Megatron's embedding group) before the dp
/// reduction; the last stage's norm and checkpoint part leave unit 0 to the first; the squares summed
/// over the stages. A stage's loss is 0 but on the last stage, so it counts everywhere.
class PipelineAxis final : public StepAxis {
public:
    /// embedding: the first and last stage's Comm (device buffers; null on the middle stages and with
    /// an untied head); stages: every stage of this pipeline (host buffers); unit0_numel: unit 0's
    /// elements (the layout's); last: whether this rank is the last stage. All outlive it.
    PipelineAxis(ZeroEngine& engine, Comm* embedding, Comm& stages, size_t unit0_numel, DType act, bool last);
    const char* name() const override { return "pp"; }
    void before_reduce() override;
    void norm_skips(NormSkips& s) const override { s.embeddings = s.embeddings || last_; }
    void sum_norm(float* sq) override { stages_.all_reduce_sum(sq, 1, DType::f32); }
    bool saves_unit(int u) const override { return !(last_ && u == 0); }

private:
    ZeroEngine& engine_;
    Comm* embedding_;
    Comm& stages_;
    const size_t unit0_;
    const DType act_;
    const bool last_;
};

/// Expert parallelism (parallel.ep > 1, docs/parallelism.md "Expert parallelism") over its gradient
/// sums (parallel/ep_grads.hpp EpGrads): after the dp reduction (over the ranks holding the same
/// experts) the dense pieces summed over the EP group; the local squared norm its own (the dense
/// tensors once, the experts summed over the EP group). Every EP rank reads its own data: its loss counts.
class ExpertParallelAxis final : public StepAxis {
public:
    /// grads: the rank's EpGrads (outlives the axis).
    explicit ExpertParallelAxis(EpGrads& grads) : grads_(grads) {}
    const char* name() const override { return "ep"; }
    /// EpGrads::reduce: the dense pieces of the grad shard over the EP group.
    void after_reduce() override { grads_.reduce(); }
    /// EpGrads::norm_squared.
    bool local_norm_squared(float* scratch, float* sq) override {
        *sq = grads_.norm_squared(scratch);
        return true;
    }

private:
    EpGrads& grads_;
};

/// Context parallelism (parallel.cp > 1, docs/parallelism.md "Context parallelism"): each rank
/// computes T / cp positions of a window. Its gradients need no sync of their own: the cp ranks are
/// inside the dp group the engine reduces over (Topology's dp counts dp x cp), which also makes the
/// loss's world mean the mean over each window's ranks.
class ContextParallelAxis final : public StepAxis {
public:
    explicit ContextParallelAxis(int cp) : cp_(cp) {}
    const char* name() const override { return "cp"; }
    int window_split() const override { return cp_; }

private:
    const int cp_;
};

/// The step's axes: the data-parallel spine (a ZeroEngine over dp ranks, the world Comm for the
/// loss) and the other axes in protocol order. Collective: every rank makes the same calls in order.
class StepAxes {
public:
    /// engine: this rank's ZeroEngine; world: every rank over host buffers; dp: the ranks a gradient is
    /// averaged over (Topology::dp, cp included). Both outlive it.
    StepAxes(ZeroEngine& engine, Comm& world, int dp);
    /// Appends `axis` (the next in protocol order).
    void add(std::unique_ptr<StepAxis> axis);
    const std::vector<std::unique_ptr<StepAxis>>& axes() const { return axes_; }
    int dp() const { return dp_; }

    /// d(loss)/d(per-position loss) for micro-batches of (B, T) over `accum` micro-batches: this rank's
    /// loss is the mean over its B * (T / split) * accum positions, split the axes' window_split().
    float dloss(int B, int T, int accum) const;
    /// Zeroes the gradients (ZeroEngine::begin_step).
    void begin_step() { engine_.begin_step(); }
    /// The gradient sync after the backward: each axis' before_reduce, the dp reduction
    /// (ZeroEngine::reduce_grads), each axis' after_reduce.
    void sync_grads();
    /// The averaged gradient's norm: the local squares (the first axis' local_norm_squared, else
    /// ZeroEngine::grad_norm_squared without what the axes skip, summed over the dp ranks), each axis'
    /// sum_norm, sqrt / dp. scratch: one device fp32.
    float grad_norm(float* scratch);
    /// The mean over the dp ranks of a per-rank value v (a loss): 0 from the ranks an axis does not
    /// count, summed over the world Comm (rank order, the same on every rank), / dp. v on one rank.
    float loss_mean(float v);
    /// Whether this rank's checkpoint part writes unit u (every axis agrees).
    bool saves_unit(int u) const;
    /// After the optimizer wrote the param shard: ZeroEngine::gather_params.
    void after_update() { engine_.gather_params(); }

private:
    ZeroEngine& engine_;
    Comm& world_;
    const int dp_;
    std::vector<std::unique_ptr<StepAxis>> axes_;
};

}  // namespace llmtrain
