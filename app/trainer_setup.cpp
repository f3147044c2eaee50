// app/trainer_setup.cpp — building a run (Trainer::Impl's constructor): the data first, so a bad
// file fails before any large allocation, then the backend, the model state, its initial weights
// and warm-up, the LR schedule and the checkpoints. Out of app/trainer.cpp so the loop reads
// apart from what it runs on.
#include "app/trainer_impl.hpp"

#include "data/sharded_dataset.hpp"
#include "data/token_dataset.hpp"
#include "model/backend.hpp"

namespace llmtrain {

namespace {

/// The step's parallelisms over `ms` (parallel/step_axes.hpp), in protocol order after the
/// data-parallel spine: ep, tp, pp, cp, each where it is in use. The pipeline's tied-embedding sum
/// comes before the dp reduction, the EP group's dense sum and TP's replicated broadcast after it,
/// the norm is summed over the TP group, then the stages: the order the step's bits depend on.
std::unique_ptr<StepAxes> step_axes_of(ModelState& ms, const Topology& topo, Comm& world, DType act) {
    auto axes = std::make_unique<StepAxes>(*ms.engine, world, topo.dp());
    if (ms.ep_grads) axes->add(std::make_unique<ExpertParallelAxis>(*ms.ep_grads));
    if (ms.tp_group)  // only a sum over other ranks (dp, or the tied-embedding pair) can make the copies differ
        axes->add(std::make_unique<TensorParallelAxis>(*ms.engine, *ms.tp_group, *ms.tp_host_comm, act,
                                                       topo.dp() > 1 || ms.embedding_comm != nullptr));
    if (ms.pipe)
        axes->add(std::make_unique<PipelineAxis>(*ms.engine, ms.embedding_comm.get(), *ms.stage_comm,
                                                 ms.layout->units()[0].numel, act, topo.stage() == topo.pp() - 1));
    if (topo.cp() > 1) axes->add(std::make_unique<ContextParallelAxis>(topo.cp()));
    return axes;
}

}  // namespace

Trainer::Impl::Impl(const Config& c, const RunShape& s, Comm& cm)
    : cfg(c), comm(cm), shape(s), topo(s.topology(cm.rank())), dp(topo.dp()), rank(cm.rank()), B(s.B), T(s.T),
      accum(s.accum),
      sampler_rng(c.run.seed),
      trace(std::make_unique<StepTrace>(c.run.trace, c.run.max_steps, c.run.run_dir, rank, topo.stage())) {
    // Data first: a bad file fails before any large allocation. HellaSwag's tokenizer is read
    // before the loaders' I/O threads start (HDF5 may not be thread-safe). Items are split by the
    // data index: a CP group scores the same items together, each rank its rows of every window.
    if (cfg.run.eval_hellaswag_interval > 0)
        hellaswag = std::make_unique<HellaSwagInLoop>(cfg, shape.B, shape.T, shape.model.vocab_size, topo.data_index(),
                                                      topo.data_parallel());
    data = open_trainer_data(cfg, shape, topo);
    if (rank == 0 && cfg.run.sample_interval > 0) {
        TokenDataset ds(expand_data_path(data.train->info().path).front());  // the (first) source's first shard
        tokenizer.emplace(Tokenizer::from_dataset(ds));
    }
    ops = make_backend(cfg.run.backend, precision_name(shape.precision), shape.cuda);
    alloc = std::make_unique<Allocator>(*ops);
    const CommOptions& co = shape.comm;
    const CommFactory comms = [&](const std::vector<int>& ranks, bool host) {
        return host ? make_mpi_comm(ranks, co) : make_comm(*ops, ranks, co);
    };
    ms = make_model_state(cfg, shape, *alloc, topo, comms, data.train->info().eos_id);
    axes = step_axes_of(ms, topo, comm, ops->act_dtype());
    init_weights(cfg, shape, *ms.gpt, *ms.adam, ms.engine->param_shard());  // random, or model.init_from's file
    if (ms.pipe) ms.pipe->warm_up();  // its junk gradients are zeroed by the first step's begin_step
    else if (std::string(ops->name()) == "cuda") {  // the same, without a pipeline (docs/cuda.md "First step")
        ms.gpt->warm_up(accum);
        ms.engine->reduce_grads();  // ZeRO-2/3 finish its reductions here, not inside step 1's
    }
    sched.lr = cfg.optimizer.lr;
    sched.min_lr = cfg.lr_schedule.min_lr;
    sched.warmup_steps = cfg.lr_schedule.warmup_steps;
    sched.decay_steps = cfg.run.max_steps;
    sched.decay = parse_lr_decay(cfg.lr_schedule.decay);
    sched.decay_ratio = cfg.lr_schedule.decay_ratio;
    sched.decay_type = parse_wsd_decay_type(cfg.lr_schedule.decay_type);
    norm_scratch = static_cast<float*>(alloc->alloc(MemCategory::workspace, sizeof(float)));
    // With tp > 1 or ep > 1 a checkpoint holds the whole model like a tp = 1 one (so any tp or ep
    // resumes it): the saver writes pieces of the whole tensors (TrainerCheckpoints::save_whole).
    if (topo.tp() > 1 || ms.ep_grads) full_layout = std::make_unique<ParamLayout>(shape.model);
    checkpoints = std::make_unique<TrainerCheckpoints>(cfg, shape, comm, topo, ms, *axes, *alloc, full_layout.get(),
                                                       [this] { return train_state(); });

    rss_lines.push_back(peak_rss_line("at start, after the init and the checkpoint snapshot's reserve"));
}

}  // namespace llmtrain
