// parallel/step_axes.cpp — the step's axes (see step_axes.hpp).
#include "parallel/step_axes.hpp"

#include <cmath>
#include <stdexcept>

namespace llmtrain {

TensorParallelAxis::TensorParallelAxis(ZeroEngine& engine, TpGroup& group, Comm& host, DType act, bool sync_replicated)
    : engine_(engine), group_(group), host_(host), act_(act), sync_(sync_replicated) {}

void TensorParallelAxis::after_reduce() {
    if (!sync_) return;  // only a sum over other ranks can make the replicated gradients differ
    const size_t es = dtype_size(act_);
    for (const FlatRange& r : engine_.shard_pieces(false))
        group_.comm().broadcast(static_cast<char*>(engine_.grad_shard()) + r.offset * es, r.numel, act_, 0);
}

PipelineAxis::PipelineAxis(ZeroEngine& engine, Comm* embedding, Comm& stages, size_t unit0_numel, DType act, bool last)
    : engine_(engine), embedding_(embedding), stages_(stages), unit0_(unit0_numel), act_(act), last_(last) {}

void PipelineAxis::before_reduce() {
    if (embedding_) embedding_->all_reduce_sum(engine_.acquire_grads(0), unit0_, act_);
}

StepAxes::StepAxes(ZeroEngine& engine, Comm& world, int dp) : engine_(engine), world_(world), dp_(dp) {
    if (dp < 1) throw std::invalid_argument("StepAxes: dp must be >= 1, got " + std::to_string(dp));
}

void StepAxes::add(std::unique_ptr<StepAxis> axis) {
    if (!axis) throw std::invalid_argument("StepAxes::add: null axis");
    axes_.push_back(std::move(axis));
}

float StepAxes::dloss(int B, int T, int accum) const {
    int split = 1;
    for (const auto& a : axes_) split *= a->window_split();
    return 1.0f / (float(B) * float(T / split) * float(accum));
}

void StepAxes::sync_grads() {
    for (const auto& a : axes_) a->before_reduce();
    engine_.reduce_grads();
    for (const auto& a : axes_) a->after_reduce();
}

float StepAxes::grad_norm(float* scratch) {
    float sq = 0;
    bool local = false;
    for (const auto& a : axes_)
        if (a->local_norm_squared(scratch, &sq)) {
            local = true;
            break;
        }
    if (!local) {
        NormSkips skip;
        for (const auto& a : axes_) a->norm_skips(skip);
        sq = engine_.grad_norm_squared(scratch, skip.embeddings, skip.replicated);
    }
    for (const auto& a : axes_) a->sum_norm(&sq);
    return std::sqrt(sq) / float(dp_);
}

float StepAxes::loss_mean(float v) {
    if (world_.size() == 1) return v;
    for (const auto& a : axes_)
        if (!a->counts_loss()) v = 0;
    world_.all_reduce_sum(&v, 1, DType::f32);
    return v / float(dp_);
}

bool StepAxes::saves_unit(int u) const {
    for (const auto& a : axes_)
        if (!a->saves_unit(u)) return false;
    return true;
}

}  // namespace llmtrain
