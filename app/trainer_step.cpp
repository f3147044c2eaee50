// app/trainer_step.cpp — one optimizer step (Trainer::Impl::train_step), composed of the step's
// axes (parallel/step_axes.hpp, built by step_axes_of in trainer_setup.cpp): the data-parallel
// spine (ZeRO) and, in protocol order, expert, tensor, pipeline and context parallelism, each owning
// its part of the loss mean, the gradient sync, the gradient norm and the checkpoint view. The
// collectives' order is the step's protocol: every rank calls them alike.
#include "app/trainer_impl.hpp"

#include <cmath>

#include "optim/grad_clip.hpp"

namespace llmtrain {

bool Trainer::Impl::train_step(float* loss, float* lr, float* norm) {
    *lr = sched.at(int(progress.step));
    axes->begin_step();
    // dloss is d(loss)/d(per-position loss): each rank's loss is the mean over its B*T*accum
    // positions (B*T/cp of each window with context parallelism), averaged over the dp ranks below.
    const float dloss = axes->dloss(B, T, accum);
    double sum = 0;
    if (ms.pipe) {
        sum = ms.pipe->train(accum, [&](int, int* in, int* tgt) { data.train->next(in, tgt); }, dloss);
    } else {
        for (int a = 0; a < accum; ++a) {  // queued: the losses are read once, below
            data.train->next(data.inputs.data(), data.targets.data());
            ms.engine->reduce_during_backward(shape.overlap_grad_reduce && a == accum - 1);
            ms.gpt->forward_backward(data.inputs.data(), data.targets.data(), dloss);
        }
    }
    // The pipeline's tied-embedding sum, the dp reduction, the EP group's dense sum, TP's replicated
    // gradients from index 0 (StepAxes::sync_grads, in the axes' order).
    axes->sync_grads();
    // The grad shard now holds the sum over the dp ranks: the averaged gradient is that / dp; the
    // squares summed over the TP group, then the stages, each tensor counted once (StepAxes::grad_norm).
    *norm = axes->grad_norm(norm_scratch);
    if (!ms.pipe) sum = ms.gpt->take_loss_sum();  // one event wait, after the norm's own
    *loss = axes->loss_mean(float(sum / accum));
    moe_after_step();  // the balance loss and expert loads (trainer_moe.cpp)
    progress.advance(tokens_per_step());
    // Every rank sees the same all-reduced loss and norm, so every rank decides alike.
    if (!std::isfinite(*loss) || !std::isfinite(*norm)) return false;
    const float scale = clip_scale(*norm, shape.grad_clip) / float(axes->dp());
    if (checkpoints) checkpoints->before_update();  // a checkpoint's snapshot copies finish first
    ms.adam->step(ms.engine->param_shard(), ms.engine->grad_shard(), *lr, scale);
    axes->after_update();  // the engine gathers the updated params
    return true;
}

}  // namespace llmtrain
