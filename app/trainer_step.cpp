// app/trainer_step.cpp — one optimizer step (Trainer::Impl::train_step) and the reductions it is
// made of: the dp mean of the loss, the tied embedding's gradient sum over the pipeline, the TP
// group's replicated gradients. The collectives' order here is the step's protocol: every rank
// calls them alike.
#include "app/trainer_impl.hpp"

#include <cmath>

#include "optim/grad_clip.hpp"

namespace llmtrain {

float Trainer::Impl::dp_mean(float v) {
    if (topo.world_size() == 1) return v;
    if (topo.tp_index() != 0) v = 0;
    comm.all_reduce_sum(&v, 1, DType::f32);
    return v / float(dp);
}

void Trainer::Impl::sum_embedding_grads() {
    if (!ms.embedding_comm) return;
    ms.embedding_comm->all_reduce_sum(ms.engine->acquire_grads(0), ms.layout->units()[0].numel, ops->act_dtype());
}

void Trainer::Impl::same_replicated_grads() {
    const size_t es = dtype_size(ops->act_dtype());
    for (const FlatRange& r : ms.engine->shard_pieces(false))
        ms.tp_group->comm().broadcast(static_cast<char*>(ms.engine->grad_shard()) + r.offset * es, r.numel,
                                   ops->act_dtype(), 0);
}

bool Trainer::Impl::train_step(float* loss, float* lr, float* norm) {
    *lr = sched.at(int(step));
    ms.engine->begin_step();
    // dloss is d(loss)/d(per-position loss): each rank's loss is the mean over its B*T*accum
    // positions (B*T/cp of each window with context parallelism), averaged over the dp ranks below.
    const float dloss = 1.0f / (float(B) * float(T / topo.cp()) * float(accum));
    double sum = 0;
    if (ms.pipe) {
        sum = ms.pipe->train(accum, [&](int, int* in, int* tgt) { train->next(in, tgt); }, dloss);
        sum_embedding_grads();
    } else {
        for (int a = 0; a < accum; ++a) {  // queued: the losses are read once, below
            train->next(inputs.data(), targets.data());
            ms.engine->reduce_during_backward(cfg.parallel.overlap_grad_reduce && a == accum - 1);
            ms.gpt->forward_backward(inputs.data(), targets.data(), dloss);
        }
    }
    ms.engine->reduce_grads();
    if (ms.ep_grads) ms.ep_grads->reduce();  // expert parallelism: the dense gradients over the EP group too
    // Only a sum over other ranks (dp, or the pipeline's tied-embedding pair) can make them differ.
    if (ms.tp_group && (dp > 1 || ms.embedding_comm)) same_replicated_grads();
    // The grad shard now holds the sum over the dp ranks: the averaged gradient is that / dp. With
    // a pipeline the stages' squares are summed, the tied wte counted once (on the first stage).
    // With tensor parallelism the TP ranks' squares are summed, the replicated tensors (the same
    // on every TP rank) counted once (on TP index 0); one MPI sum of a float, the same on every rank.
    float sq = ms.ep_grads ? ms.ep_grads->norm_squared(norm_scratch)  // experts summed over the EP group
                           : ms.engine->grad_norm_squared(norm_scratch, ms.pipe && last_stage(), topo.tp_index() != 0);
    if (ms.tp_host_comm) ms.tp_host_comm->all_reduce_sum(&sq, 1, DType::f32);
    if (ms.stage_comm) ms.stage_comm->all_reduce_sum(&sq, 1, DType::f32);
    *norm = std::sqrt(sq) / float(dp);
    if (!ms.pipe) sum = ms.gpt->take_loss_sum();  // one event wait, after the norm's own
    *loss = dp_mean(float(sum / accum));
    moe_after_step();  // the balance loss and expert loads (trainer_moe.cpp)
    ++step;
    tokens_seen += tokens_per_step();
    // Every rank sees the same all-reduced loss and norm, so every rank decides alike.
    if (!std::isfinite(*loss) || !std::isfinite(*norm)) return false;
    const float scale = clip_scale(*norm, cfg.training.grad_clip) / float(dp);
    if (saver) saver->before_update();  // a checkpoint's snapshot copies finish first
    ms.adam->step(ms.engine->param_shard(), ms.engine->grad_shard(), *lr, scale);
    ms.engine->gather_params();
    return true;
}

}  // namespace llmtrain
