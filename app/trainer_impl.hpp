// app/trainer_impl.hpp — Trainer's state and its step, evaluation and checkpoint orchestration
// (Trainer::Impl), shared by app/trainer.cpp (the loop, resume) and app/run_summary.cpp (the
// start-up summary). Internal to app/: nothing else includes it.
#pragma once
#include "app/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>

#include "app/checkpoint/checkpoint.hpp"
#include "app/checkpoint/saver.hpp"
#include "app/eval/hellaswag_eval.hpp"
#include "app/model_state.hpp"
#include "app/sampler.hpp"
#include "app/step_trace.hpp"
#include "app/tp_state.hpp"
#include "data/loader.hpp"
#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"
#include "model/backend.hpp"
#include "model/cpu/peak_flops.hpp"
#include "model/arch.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/topology.hpp"
#include "parallel/zero.hpp"

namespace llmtrain {

namespace trainer_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// "n_layer=12 n_head=12 n_embd=768 seq_len=1024 vocab_size=50304" (messages and the summary).
inline std::string shape_of(const GPTConfig& m) {
    return "n_layer=" + std::to_string(m.n_layer) + " n_head=" + std::to_string(m.n_head) +
           " n_embd=" + std::to_string(m.n_embd) + " seq_len=" + std::to_string(m.seq_len) +
           " vocab_size=" + std::to_string(m.vocab_size);
}

}  // namespace trainer_detail

struct Trainer::Impl {
    using Clock = trainer_detail::Clock;
    Config cfg;
    Comm& comm;  // every rank, MPI, host buffers: losses, flags, barriers
    const RunShape shape;  // the model, the stages' layers, the sizes, offload and CUDA options (run_shape)
    Topology topo;
    const int dp, rank, B, T, accum;
    std::unique_ptr<Ops> ops;
    std::unique_ptr<Allocator> alloc;
    std::unique_ptr<ParamLayout> layout;            // this TP rank's tensors, padded to split over the ZeRO group
    std::unique_ptr<ParamLayout> full_layout;       // tp > 1: the whole model (tp 1), as checkpoints hold it
    std::unique_ptr<Comm> zero_comm, replica_comm;  // the backend's Comm (NCCL on cuda)
    std::unique_ptr<TpGroup> tp_group;              // parallel.tp > 1: the GPT's TP group
    std::unique_ptr<Comm> tp_host_comm;             // the same ranks, host buffers (MPI)
    std::unique_ptr<ZeroEngine> engine;
    std::unique_ptr<GPT> gpt;
    std::unique_ptr<AdamW> adam;
    std::vector<std::unique_ptr<Comm>> links;        // pp > 1: to the neighbour stages
    std::unique_ptr<Comm> embedding_comm, stage_comm;
    std::unique_ptr<PipelineStage> pipe;             // pp > 1
    LRSchedule sched;
    std::unique_ptr<DataLoader> train, val;  // val: only with run.eval_interval > 0
    std::optional<Tokenizer> tokenizer;  // rank 0 with samples enabled
    float* norm_scratch = nullptr;       // (1) device fp32
    std::vector<int32_t> inputs, targets;  // (B,T) host int32
    std::mt19937_64 sampler_rng;
    std::unique_ptr<StepTrace> trace;      // run.trace
    int64_t step = 0, start_step = 0;
    uint64_t tokens_seen = 0;
    std::string run_id = new_run_id();  // replaced by the checkpoint's on resume
    int skipped_in_a_row = 0;           // consecutive non-finite steps
    std::unique_ptr<CheckpointSaver> saver;  // the checkpoint writer (background thread when async)
    std::unique_ptr<HellaSwagInLoop> hellaswag;  // run.eval_hellaswag_interval > 0

    Impl(const Config& c, Comm& cm)
        : cfg(c), comm(cm), shape(run_shape(c, world_size())), topo(shape.topology(world_rank())), dp(topo.dp()),
          rank(cm.rank()), B(c.training.micro_batch_size), T(c.model.seq_len), accum(c.training.grad_accum_steps),
          sampler_rng(c.run.seed),
          trace(std::make_unique<StepTrace>(c.run.trace, c.run.max_steps, c.run.run_dir, rank, topo.stage())) {
        // Data first: a bad file fails before any large allocation. HellaSwag's tokenizer is read
        // before the loaders' I/O threads start (HDF5 may not be thread-safe).
        if (cfg.run.eval_hellaswag_interval > 0) hellaswag = std::make_unique<HellaSwagInLoop>(cfg, topo.dp_index(), dp);
        LoaderOptions lo;
        lo.path = cfg.data.train;
        lo.B = B;
        lo.T = T;
        lo.rank = topo.dp_index();  // data is sharded by the global dp index (a TP group reads the same batches)
        lo.world = dp;
        lo.seed = cfg.run.seed;
        lo.shuffle = true;
        lo.vocab_size = cfg.model.vocab_size;
        train = std::make_unique<DataLoader>(lo);
        if (cfg.run.eval_interval > 0) {  // else never read: a val set too small for B x dp is no error
            lo.path = cfg.data.val;
            lo.shuffle = false;
            lo.expect_tokenizer_sha256 = train->info().tokenizer_sha256;  // val must be tokenized alike
            val = std::make_unique<DataLoader>(lo);
        }
        if (rank == 0 && cfg.run.sample_interval > 0) {
            TokenDataset ds(cfg.data.train);
            tokenizer.emplace(Tokenizer::from_dataset(ds));
        }
        ops = make_backend(cfg.run.backend, cfg.training.precision, shape.cuda);
        alloc = std::make_unique<Allocator>(*ops);
        CommOptions co;
        co.timeout_s = cfg.parallel.timeout_s;
        co.comm = cfg.parallel.comm;
        co.hierarchical = cfg.parallel.hierarchical_allreduce;
        const CommFactory comms = [&](const std::vector<int>& ranks, bool host) {
            return host ? make_mpi_comm(ranks, co) : make_comm(*ops, ranks, co);
        };
        ModelState ms = make_model_state(cfg, shape, *alloc, topo, comms);
        layout = std::move(ms.layout);
        zero_comm = std::move(ms.zero_comm);
        replica_comm = std::move(ms.replica_comm);
        tp_group = std::move(ms.tp_group);
        tp_host_comm = std::move(ms.tp_host_comm);
        engine = std::move(ms.engine);
        gpt = std::move(ms.gpt);
        adam = std::move(ms.adam);
        links = std::move(ms.links);
        embedding_comm = std::move(ms.embedding_comm);
        stage_comm = std::move(ms.stage_comm);
        pipe = std::move(ms.pipe);
        init_weights(cfg, *gpt, *adam, engine->param_shard());  // random, or model.init_from's file
        if (pipe) pipe->warm_up();  // its junk gradients are zeroed by the first step's begin_step
        else if (std::string(ops->name()) == "cuda") {  // the same, without a pipeline (docs/cuda.md "First step")
            gpt->warm_up(accum);
            engine->reduce_grads();  // ZeRO-2/3 finish its reductions here, not inside step 1's
        }
        sched.lr = cfg.optimizer.lr;
        sched.min_lr = cfg.lr_schedule.min_lr;
        sched.warmup_steps = cfg.lr_schedule.warmup_steps;
        sched.decay_steps = cfg.run.max_steps;
        sched.decay = parse_lr_decay(cfg.lr_schedule.decay);
        norm_scratch = static_cast<float*>(alloc->alloc(MemCategory::workspace, sizeof(float)));
        // With tp > 1 a checkpoint holds the whole model like a tp = 1 one (so any tp resumes it):
        // one part per pipeline stage, gathered on the stage's first rank (save_tp).
        if (topo.tp() > 1) full_layout = std::make_unique<ParamLayout>(shape.model);
        saver = std::make_unique<CheckpointSaver>(comm, *alloc, full_layout ? *full_layout : *layout, cfg.run.run_dir,
                                                  topo.pp() * (full_layout ? 1 : topo.zero_group_size()),
                                                  cfg.checkpoint.keep_last, cfg.checkpoint.async);
        // The snapshot's host memory, mapped now rather than inside the first checkpoint's copy; none
        // when checkpoints are off (checkpoint.interval = 0, checkpoint.at_end = false).
        if (const size_t n = checkpoint_snapshot_elems(cfg, topo, *engine, *adam)) saver->reserve(n);

        inputs.resize(size_t(B) * T);
        targets.resize(size_t(B) * T);
    }

    /// The whole model's parameters (with tp > 1 this rank holds about 1/tp of them).
    size_t nparams() const { return (full_layout ? *full_layout : *layout).num_parameters(); }
    uint64_t tokens_per_step() const { return uint64_t(cfg.training.global_batch_size) * T; }

    /// Mean of a per-rank value over the dp ranks. With a pipeline only the last stage's ranks hold
    /// the value and the others pass 0 (adding 0 first keeps the sum of the dp values exact); with
    /// tensor parallelism every TP rank holds the same value and only TP index 0 passes it.
    float dp_mean(float v) {
        if (topo.world_size() == 1) return v;
        if (topo.tp_index() != 0) v = 0;
        comm.all_reduce_sum(&v, 1, DType::f32);
        return v / float(dp);
    }

    bool last_stage() const { return topo.stage() == topo.pp() - 1; }

    /// The tied wte's gradient: the embedding's part (first stage) plus the LM head's (last stage),
    /// summed on both so their copies of wte stay equal (Megatron's embedding group).
    void sum_embedding_grads() {
        if (!embedding_comm) return;
        embedding_comm->all_reduce_sum(engine->acquire_grads(0), layout->units()[0].numel, ops->act_dtype());
    }

    /// Tensor parallelism: the replicated tensors' reduced gradients (LayerNorms, wpe, row-parallel
    /// biases) from TP index 0 to the group. They are equal before the dp reduction, but each TP
    /// index reduces over its own ZeRO/replica communicators, which real NCCL need not sum alike:
    /// one unit in the last place would let the copies drift apart (cuda_emu_tp shows it with
    /// CUDA_EMU_NCCL_PERTURB). About 3 broadcasts per layer of its replicated elements (0.1% of GPT-2's).
    void same_replicated_grads() {
        const size_t es = dtype_size(ops->act_dtype());
        for (const FlatRange& r : engine->shard_pieces(false))
            tp_group->comm().broadcast(static_cast<char*>(engine->grad_shard()) + r.offset * es, r.numel,
                                       ops->act_dtype(), 0);
    }

    /// One optimizer step at 0-based index `step`: (mean loss over micro-batches and ranks, lr, norm).
    /// Returns false when the loss or the gradient norm is not finite: then nothing is updated.
    bool train_step(float* loss, float* lr, float* norm) {
        *lr = sched.at(int(step));
        engine->begin_step();
        // dloss is d(loss)/d(per-position loss): the step's loss is the mean over B*T*accum positions.
        const float dloss = 1.0f / (float(B) * float(T) * float(accum));
        double sum = 0;
        if (pipe) {
            sum = pipe->train(accum, [&](int, int* in, int* tgt) { train->next(in, tgt); }, dloss);
            sum_embedding_grads();
        } else {
            for (int a = 0; a < accum; ++a) {  // queued: the losses are read once, below
                train->next(inputs.data(), targets.data());
                engine->reduce_during_backward(cfg.parallel.overlap_grad_reduce && a == accum - 1);
                gpt->forward_backward(inputs.data(), targets.data(), dloss);
            }
        }
        engine->reduce_grads();
        // Only a sum over other ranks (dp, or the pipeline's tied-embedding pair) can make them differ.
        if (tp_group && (dp > 1 || embedding_comm)) same_replicated_grads();
        // The grad shard now holds the sum over the dp ranks: the averaged gradient is that / dp. With
        // a pipeline the stages' squares are summed, the tied wte counted once (on the first stage).
        // With tensor parallelism the TP ranks' squares are summed, the replicated tensors (the same
        // on every TP rank) counted once (on TP index 0); one MPI sum of a float, the same on every rank.
        float sq = engine->grad_norm_squared(norm_scratch, pipe && last_stage(), topo.tp_index() != 0);
        if (tp_host_comm) tp_host_comm->all_reduce_sum(&sq, 1, DType::f32);
        if (stage_comm) stage_comm->all_reduce_sum(&sq, 1, DType::f32);
        *norm = std::sqrt(sq) / float(dp);
        if (!pipe) sum = gpt->take_loss_sum();  // one event wait, after the norm's own
        *loss = dp_mean(float(sum / accum));
        ++step;
        tokens_seen += tokens_per_step();
        // Every rank sees the same all-reduced loss and norm, so every rank decides alike.
        if (!std::isfinite(*loss) || !std::isfinite(*norm)) return false;
        const float scale = clip_scale(*norm, cfg.training.grad_clip) / float(dp);
        if (saver) saver->before_update();  // a checkpoint's snapshot copies finish first
        adam->step(engine->param_shard(), engine->grad_shard(), *lr, scale);
        engine->gather_params();
        return true;
    }

    /// Mean val loss over eval_steps micro-batches per rank (0: the whole file), from the file's start.
    float evaluate() {
        val->restore(LoaderState{0, cfg.run.seed});
        const uint64_t n = cfg.run.eval_steps > 0 ? uint64_t(cfg.run.eval_steps) : val->batches_per_epoch();
        double sum = 0;
        for (uint64_t i = 0; i < n; ++i) {
            val->next(inputs.data(), targets.data());
            sum += pipe ? pipe->evaluate(inputs.data(), targets.data()) : gpt->evaluate(inputs.data(), targets.data());
        }
        return dp_mean(float(sum / double(n)));
    }

    /// Starts a checkpoint of the state after `step` (docs/training.md "Checkpoints"), collective:
    /// waits for the one in flight, then each rank of replica 0 (together they hold every shard
    /// once) copies its fp32 shard (weights, m, v) into the saver's host snapshot on the saver's own
    /// stream, and the saver's writer thread writes it as optim_<k>.h5 and model_<k>.h5 (model.h5
    /// when it is the only part) while training goes on; the commit
    /// follows at a later step boundary (CheckpointSaver::poll) or at complete().
    void save(RunLog& log, Metrics* metrics) {
        const auto t0 = Clock::now();
        const double waited = saver->begin(step, log, metrics);  // for the previous checkpoint
        if (full_layout) return save_tp(log, metrics, t0, waited);
        std::string err;
        int k = -1;
        std::vector<OptimShardView> views;
        if (topo.replica() == 0) {
            // Shard-local: the weights (master weights when kept), m, v — read from the device and,
            // with offload, straight from the host state.
            const size_t ns = adam->numel();
            float* w = saver->snapshot(ns);
            float *m = w + ns, *v = m + ns;
            saver->begin_copy();  // on the saver's stream, after this step's work (an event)
            adam->state_to_host(engine->param_shard(), w, m, v, /*wait=*/false);
            saver->end_copy();  // the next update waits for it (train_step: before_update)
            if (pipe && (topo.stage() == 0 || last_stage())) {
                saver->wait_copy();  // read here, on the host
                err = tied_wte_problem(w);
            }
            size_t local = 0;
            for (const FlatRange& r : engine->shard()) {
                // The last stage's copy of the tied wte (unit 0) is the first stage's: saved once, there.
                const bool copy = pipe && last_stage() && r.offset < layout->units()[1].offset;
                if (!copy)
                    views.push_back({r.offset, r.offset + r.numel, m + local, v + local, w + local});
                local += r.numel;
            }
            k = topo.stage() * topo.zero_group_size() + topo.zero_index();
        }
        saver->submit(k, std::move(views), train_state(), err, trainer_detail::seconds_since(t0) - waited, log, metrics);
    }

    /// The stream position of a checkpoint written before stream positions ([loader] epoch, batch:
    /// each rank's micro-batch index in epochs of batches_per_epoch()). It converts only in the
    /// layout it was written in: the same dp, and its step count times grad_accum_steps equal to the
    /// micro-batches epoch, batch count at this micro_batch_size. Errors: CheckpointError otherwise.
    LoaderState legacy_loader_state(const TrainState& st, const std::string& dir) const {
        const auto [epoch, batch] = *st.legacy_loader;
        const uint64_t bpe = train->batches_per_epoch();
        if (st.dp != dp || batch >= bpe || epoch * bpe + batch != uint64_t(st.step) * uint64_t(accum))
            throw CheckpointError(
                dir + "/state.toml: [loader] epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch) +
                " (an older llmtrain's micro-batch index per rank, at dp " + std::to_string(st.dp) + ", step " +
                std::to_string(st.step) + ") does not fit dp " + std::to_string(dp) + ", micro_batch_size " +
                std::to_string(B) + ", grad_accum_steps " + std::to_string(accum) +
                "; resume it once with the dp, micro_batch_size and grad_accum_steps it was written with (its "
                "next checkpoint then resumes in any layout)");
        return train->legacy_position(epoch, batch);
    }

    /// With a pipeline, on replica 0 at its first and last stage: the two copies of the tied wte
    /// must be equal, bit for bit; the last stage sends its chunk of unit 0 (same ZeRO and TP index,
    /// same chunk) to the first, which compares. w: this rank's shard-local weights (unit 0 first).
    /// Returns the problem on the first stage, else "".
    std::string tied_wte_problem(const float* w) {
        if (!pipe || !embedding_comm) return "";  // no pipeline, a middle stage, or an untied head: one copy
        const size_t n0 = engine->shard().front().numel;  // unit 0 comes first
        if (topo.stage() != 0) {
            stage_comm->send(w, n0, DType::f32, 0);
            return "";
        }
        std::vector<float> other(n0);
        stage_comm->recv(other.data(), n0, DType::f32, topo.pp() - 1);
        return std::memcmp(other.data(), w, n0 * sizeof(float)) == 0
                   ? ""
                   : "checkpoint: the first and last pipeline stage's copies of the tied wte differ";
    }

    /// The units of this rank's stage (ascending, as its ZeRO shard holds them), or with `saved`
    /// those its checkpoint writes: the last stage's copy of the tied wte is the first stage's.
    std::vector<int> tp_units(bool saved) const {
        std::vector<int> out;
        for (int u = 0; u < int(layout->units().size()); ++u)
            if (engine->holds(u) && !(saved && pipe && last_stage() && u == 0)) out.push_back(u);
        return out;
    }

    /// save() with tp > 1: the ranks of replica 0 send their fp32 shards to their stage's first rank,
    /// which writes the stage's whole tensors as part k = stage, laid out as full_layout (the files
    /// of a tp = 1 run; app/tp_state.hpp). Costs that rank 12 bytes of host memory per parameter of
    /// its stage (docs/training.md "Tensor parallelism").
    void save_tp(RunLog& log, Metrics* metrics, Clock::time_point t0, double waited) {
        std::vector<OptimShardView> views;
        std::string err;
        int k = -1;
        if (topo.replica() == 0) {
            const size_t ns = adam->numel();
            std::vector<float> mine(3 * ns);
            adam->state_to_host(engine->param_shard(), mine.data(), mine.data() + ns, mine.data() + 2 * ns);
            err = tied_wte_problem(mine.data());
            const std::string e = gather_tp_stage(comm, topo, *full_layout, zero_shard_multiple(topo.zero_group_size()),
                                                  tp_units(false), tp_units(true), mine.data(), ns,
                                                  [&](size_t n) { return saver->snapshot(n); }, views);
            if (err.empty()) err = e;
            if (topo.world_rank() == topo.rank_of(topo.stage(), 0, 0, 0)) k = topo.stage();
        }
        saver->submit(k, std::move(views), train_state(), err, trainer_detail::seconds_since(t0) - waited, log, metrics);
    }

    TrainState train_state() const {
        TrainState st;
        st.step = step;
        st.tokens_seen = tokens_seen;
        st.loader = train->state();
        std::ostringstream rng;
        rng << sampler_rng;
        st.sampler_rng = rng.str();
        st.adam_t = adam->t();
        st.model_config_hash = model_config_hash(cfg);
        st.model = shape.model;
        st.dp = dp;
        st.world_size = world_size();
        st.backend = ops->name();
        st.precision = cfg.training.precision;
        st.run_id = run_id;
        return st;
    }
};

}  // namespace llmtrain
