// app/trainer.cpp — the training loop (see trainer.hpp).
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
#include "app/hellaswag_eval.hpp"
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

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;  // the signal number that asked us to stop, or 0

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string mib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
    return buf;
}

std::string shape_of(const GPTConfig& m) {
    return "n_layer=" + std::to_string(m.n_layer) + " n_head=" + std::to_string(m.n_head) +
           " n_embd=" + std::to_string(m.n_embd) + " seq_len=" + std::to_string(m.seq_len) +
           " vocab_size=" + std::to_string(m.vocab_size);
}

/// The start-up summary's model: "GPT-2 <shape>", or "Llama <shape> n_kv_head=K intermediate_size=F"
/// and "untied" when its head is (model/arch.hpp).
std::string arch_shape_of(const GPTConfig& m) {
    if (m.arch == Arch::gpt2) return "GPT-2 " + shape_of(m);
    const ArchSpec s(m);
    return "Llama " + shape_of(m) + " n_kv_head=" + std::to_string(s.NKV) + " intermediate_size=" +
           std::to_string(s.F) + (s.tied ? "" : " untied");
}

}  // namespace

void install_stop_signal_handlers() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
}

double peak_flops_for(const Config& cfg, const std::string& backend_name) {
    if (cfg.run.peak_flops > 0) return cfg.run.peak_flops;
    return backend_name == "cuda" ? 989e12 : cpu::peak_flops();
}

struct Trainer::Impl {
    Config cfg;
    Comm& comm;  // every rank, MPI, host buffers: losses, flags, barriers
    Topology topo;
    const int dp, rank, B, T, accum;
    std::unique_ptr<Ops> ops;
    std::unique_ptr<Allocator> alloc;
    GPTConfig gcfg;
    std::unique_ptr<ParamLayout> layout;            // this TP rank's tensors, padded to split over the ZeRO group
    std::unique_ptr<ParamLayout> full_layout;       // tp > 1: the whole model (tp 1), as checkpoints hold it
    std::unique_ptr<Comm> zero_comm, replica_comm;  // the backend's Comm (NCCL on cuda)
    std::unique_ptr<TpGroup> tp_group;              // parallel.tp > 1: the GPT's TP group
    std::unique_ptr<Comm> tp_host_comm;             // the same ranks, host buffers (MPI)
    std::unique_ptr<ZeroEngine> engine;
    std::unique_ptr<GPT> gpt;
    std::unique_ptr<AdamW> adam;
    std::vector<StageLayers> plan;                   // every pipeline stage's layers (stage_plan_of)
    std::vector<std::unique_ptr<Comm>> links;        // pp > 1: to the neighbour stages
    std::unique_ptr<Comm> embedding_comm, stage_comm;
    std::unique_ptr<PipelineStage> pipe;             // pp > 1
    LRSchedule sched;
    std::unique_ptr<DataLoader> train, val;
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
        : cfg(c), comm(cm), topo(world_size(), world_rank(), c.parallel.pp, zero_group_of(c), c.parallel.tp), dp(topo.dp()),
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
        lo.path = cfg.data.val;
        lo.shuffle = false;
        lo.expect_tokenizer_sha256 = train->info().tokenizer_sha256;  // val must be tokenized alike
        val = std::make_unique<DataLoader>(lo);
        if (rank == 0 && cfg.run.sample_interval > 0) {
            TokenDataset ds(cfg.data.train);
            tokenizer.emplace(Tokenizer::from_dataset(ds));
        }
        ops = make_backend(cfg.run.backend, cfg.training.precision, cuda_options_of(cfg));
        alloc = std::make_unique<Allocator>(*ops);
        gcfg = gpt_config_of(cfg);
        CommOptions co;
        co.timeout_s = cfg.parallel.timeout_s;
        co.comm = cfg.parallel.comm;
        co.hierarchical = cfg.parallel.hierarchical_allreduce;
        const CommFactory comms = [&](const std::vector<int>& ranks, bool host) {
            return host ? make_mpi_comm(ranks, co) : make_comm(*ops, ranks, co);
        };
        ModelState ms = make_model_state(cfg, *alloc, topo, comms);
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
        plan = stage_plan_of(cfg);
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
        if (topo.tp() > 1) full_layout = std::make_unique<ParamLayout>(gcfg);
        saver = std::make_unique<CheckpointSaver>(comm, *alloc, full_layout ? *full_layout : *layout, cfg.run.run_dir,
                                                  topo.pp() * (full_layout ? 1 : topo.zero_group_size()),
                                                  cfg.checkpoint.keep_last, cfg.checkpoint.async);
        // The snapshot's host memory, mapped now rather than inside the first checkpoint's copy.
        if (topo.replica() == 0 && !full_layout) saver->reserve(adam->numel());
        if (full_layout && topo.world_rank() == topo.rank_of(topo.stage(), 0, 0, 0)) {  // save_tp's gathering rank
            size_t n = 0;
            for (int u : tp_units(true)) n += full_layout->units()[size_t(u)].numel;
            saver->reserve(n);
        }

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
        saver->submit(k, std::move(views), train_state(), err, seconds_since(t0) - waited, log, metrics);
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
        if (!pipe || (topo.stage() != 0 && !last_stage())) return "";
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
        saver->submit(k, std::move(views), train_state(), err, seconds_since(t0) - waited, log, metrics);
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
        st.model = gcfg;
        st.dp = dp;
        st.world_size = world_size();
        st.backend = ops->name();
        st.precision = cfg.training.precision;
        st.run_id = run_id;
        return st;
    }
};

Trainer::Trainer(const Config& cfg, Comm& dp_comm) : impl_(std::make_unique<Impl>(cfg, dp_comm)) {}
Trainer::~Trainer() = default;
int64_t Trainer::step() const { return impl_->step; }

std::string Trainer::save_checkpoint(RunLog& log) {
    impl_->save(log, nullptr);
    return impl_->saver->complete(log, nullptr);
}

std::vector<std::string> Trainer::summary() const {
    const Impl& I = *impl_;
    const auto& c = I.cfg;
    std::vector<std::string> out;
    out.push_back("llmtrain: run '" + c.run.name + "' in " + c.run.run_dir);
    out.push_back("backend: " + std::string(I.ops->name()) + ", precision " + c.training.precision + ", world " +
                  std::to_string(world_size()) + ", dp " + std::to_string(I.dp) + ", tp " + std::to_string(I.topo.tp()));
    out.push_back("attention: " + std::string(I.ops->attention_name()) + " (" + I.ops->attention_reason() + ")");
    out.push_back("parallel: zero_stage " + std::to_string(c.parallel.zero_stage) + ", grad_reduce_dtype " +
                  c.parallel.grad_reduce_dtype + " | " + I.topo.describe());
    out.push_back("model: " + arch_shape_of(I.gcfg) + " | " + format_thousands(double(I.nparams())) +
                  " parameters" +
                  (I.topo.tp() > 1 ? ", " + format_thousands(double(I.layout->num_parameters())) + " on this TP rank"
                                   : std::string()));
    char fpt[64];
    std::snprintf(fpt, sizeof fpt, "%.3g", flops_per_token(I.gcfg, I.nparams(), I.T));
    out.push_back("batch: micro_batch_size " + std::to_string(I.B) + " x grad_accum_steps " + std::to_string(I.accum) +
                  " x dp " + std::to_string(I.dp) + " = global_batch_size " +
                  std::to_string(c.training.global_batch_size) + " sequences = " +
                  format_thousands(double(I.tokens_per_step())) + " tokens per step | " + fpt +
                  " training FLOPs per token");
    std::string mem = "memory (this rank):";
    for (int k = 0; k < int(MemCategory::count); ++k) {
        auto cat = MemCategory(k);
        mem += std::string(" ") + mem_category_name(cat) + " " + mib(I.alloc->current(cat)) + ",";
    }
    out.push_back(mem + " device total " + mib(I.alloc->current_total()));
    if (I.pipe) {
        const int P = I.topo.pp(), m = I.accum;
        const PipelineSchedule sch = parse_pipeline_schedule(c.pipeline.schedule);
        out.push_back("pipeline: pp " + std::to_string(P) + ", schedule " + c.pipeline.schedule + ", " +
                      std::to_string(m) + " micro-batches per step; per stage (memory of its first rank, counted "
                      "as in --dry-run):");
        for (int s = 0; s < P; ++s) {
            const StageLayers& sl = I.plan[size_t(s)];
            const auto b = estimate_memory(c, I.topo.world_size(), c.parallel.zero_stage, s);
            std::string line = "  stage " + std::to_string(s) + ": layers [" + std::to_string(sl.l0) + ", " +
                               std::to_string(sl.l1) + "), " + std::to_string(sl.checkpointed) + " recomputed, " +
                               std::to_string(max_in_flight(sch, s, P, m)) + " micro-batches in flight |";
            for (int k = 0; k < int(MemCategory::count); ++k)
                line += std::string(" ") + mem_category_name(MemCategory(k)) + " " + mib(b[k]);
            out.push_back(line + ", device total " + mib(device_bytes(b)));
        }
    }
    if (const HostOffload* off = I.adam->offload()) {
        char buf[240];
        std::snprintf(buf, sizeof buf, "optimizer: offload cpu, %s of %s shard elements on the host (fraction %g), "
                      "%d chunks of %s parameters, double-buffered", format_thousands(double(off->numel())).c_str(),
                      format_thousands(double(I.adam->numel())).c_str(), c.optimizer.offload_fraction, off->chunks(),
                      format_thousands(double(off->chunk_elems())).c_str());
        out.push_back(buf);
    }
    auto data_line = [](const char* what, const DataLoader& l) {
        const auto& i = l.info();
        return std::string("data: ") + what + " " + i.path + ": " + format_thousands(double(i.n_tokens)) +
               " tokens, " + format_thousands(double(i.n_docs)) + " documents, vocab " +
               std::to_string(i.vocab_size) + ", " + std::to_string(l.batches_per_epoch()) +
               " micro-batches per epoch per rank";
    };
    out.push_back(data_line("train", *I.train));
    out.push_back(data_line("val", *I.val));
    char sched[200];
    std::snprintf(sched, sizeof sched, "schedule: max_steps %d, lr %.3g -> %.3g (%s), warmup_steps %d, grad_clip %g",
                  c.run.max_steps, c.optimizer.lr, c.lr_schedule.min_lr, c.lr_schedule.decay.c_str(),
                  c.lr_schedule.warmup_steps, c.training.grad_clip);
    out.push_back(sched);
    if (!I.saver->async_note().empty()) out.push_back(I.saver->async_note());  // HDF5 not thread-safe
    return out;
}

std::string Trainer::resume_from(const std::string& dir) {
    Impl& I = *impl_;
    TrainState st = read_train_state(dir);
    if (st.model_config_hash != model_config_hash(I.cfg))
        throw CheckpointError("checkpoint '" + dir + "' holds a model with " + shape_of(st.model) +
                              " but the config asks for " + shape_of(I.gcfg));
    const ParamLayout& layout = *I.layout;
    std::vector<float> host(layout.total_numel());
    const size_t ns = I.adam->numel();
    std::vector<float> m(ns), v(ns), w;
    size_t local = 0;
    if (!I.full_layout) {
        read_params(dir, layout, host.data());
        for (const FlatRange& r : I.adam->ranges()) {  // the optimizer shard, by flat offset: any old sharding
            read_optim(dir, layout, r.offset, r.offset + r.numel, m.data() + local, v.data() + local);
            w.insert(w.end(), host.begin() + r.offset, host.begin() + r.offset + r.numel);
            local += r.numel;
        }
    } else {
        // tp > 1: the checkpoint holds whole tensors (written at any tp); this TP rank cuts its part.
        std::vector<float> lm(layout.total_numel()), lv(layout.total_numel());
        read_tp_local(dir, *I.full_layout, layout, host.data(), lm.data(), lv.data());
        for (const FlatRange& r : I.adam->ranges()) {
            std::copy(lm.begin() + r.offset, lm.begin() + r.offset + r.numel, m.begin() + local);
            std::copy(lv.begin() + r.offset, lv.begin() + r.offset + r.numel, v.begin() + local);
            w.insert(w.end(), host.begin() + r.offset, host.begin() + r.offset + r.numel);
            local += r.numel;
        }
    }
    I.adam->state_from_host(w.data(), m.data(), v.data());  // device and host parts alike
    // The checkpoint holds fp32 master weights. Rounded to nearest they would not be the bf16 params
    // the last step wrote stochastically; its rounding, keyed by (t, flat index), rebuilds them
    // exactly, for every copy of every element (docs/training.md "Resume").
    if (I.cfg.training.stochastic_rounding && st.adam_t > 0) round_params_of_step(host.data(), host.size(), 0, st.adam_t);
    I.engine->load_params(host.data());  // every rank takes the part it holds
    I.run_id = st.run_id.empty() ? I.run_id : st.run_id;
    I.adam->set_t(st.adam_t);
    I.step = I.start_step = st.step;
    I.tokens_seen = st.tokens_seen;
    I.train->restore(st.legacy_loader ? I.legacy_loader_state(st, dir) : st.loader);
    std::istringstream rng(st.sampler_rng);
    rng >> I.sampler_rng;
    if (!rng) throw CheckpointError(dir + "/state.toml: sampler_rng: not a std::mt19937_64 state");
    std::string note = "resume: from " + dir + " at step " + std::to_string(st.step) + " (" +
                       format_thousands(double(st.tokens_seen)) + " tokens seen)";
    if (st.dp != I.dp)  // the data stream goes on unchanged (data/loader.hpp)
        note += "; dp changed from " + std::to_string(st.dp) + " to " + std::to_string(I.dp);
    if (I.train->state().seed != I.cfg.run.seed)
        note += "; the data order keeps the checkpoint's seed " + std::to_string(I.train->state().seed);
    if (st.backend != I.ops->name() || st.precision != I.cfg.training.precision)
        note += "; written by backend " + st.backend + "/" + st.precision;
    return note;
}

void Trainer::run(RunLog& log, Metrics* metrics) {
    Impl& I = *impl_;
    const auto& rc = I.cfg.run;
    const int64_t max_steps = rc.max_steps;
    const double fpt = flops_per_token(I.gcfg, I.nparams(), I.T);
    const double peak = peak_flops_for(I.cfg, I.ops->name());
    // Memory gauges: at start, and after every step (the backend's workspaces grow in the first one);
    // the attention path with them (with "auto" it may fall back to cublas at the first step).
    auto report_memory = [&] {
        for (int k = 0; k < int(MemCategory::count); ++k)
            metrics->set_memory_bytes(mem_category_name(MemCategory(k)), double(I.alloc->current(MemCategory(k))));
        metrics->set_attention(I.ops->attention_name());
    };
    if (metrics) report_memory();
    if (I.step >= max_steps) {
        log.line("nothing to do: step " + std::to_string(I.step) + " >= run.max_steps " + std::to_string(max_steps));
        return;
    }
    const auto t_start = Clock::now();
    int64_t window_steps = 0;
    double window_train_s = 0;  // time inside train steps in the window: eval, samples, checkpoints excluded
    double train_seconds = 0;   // wall time inside train steps since start (for the ETA)
    while (I.step < max_steps) {
        const auto t0 = Clock::now();
        float loss, lr, norm;
        const bool updated = I.train_step(&loss, &lr, &norm);
        const double step_s = seconds_since(t0);
        I.trace->record(I.step, t0, I.pipe.get(), I.adam->offload(), updated);
        train_seconds += step_s;
        window_train_s += step_s;
        ++window_steps;
        const int64_t s = I.step;
        log.train_record(s, loss, lr, norm);
        if (updated) {
            I.skipped_in_a_row = 0;
        } else {
            ++I.skipped_in_a_row;
            if (metrics) metrics->add_skipped_step();
            char buf[160];
            std::snprintf(buf, sizeof buf, "step %lld: loss %g, grad norm %g: not finite, no update (%d in a row, limit "
                          "training.max_skipped_steps = %d)", (long long)s, loss, norm, I.skipped_in_a_row,
                          I.cfg.training.max_skipped_steps);
            log.line(buf);
            if (I.skipped_in_a_row >= I.cfg.training.max_skipped_steps) {
                I.saver->complete(log, metrics);  // every rank stops here alike: the checkpoint in flight is kept
                throw std::runtime_error("stopping at step " + std::to_string(s) + ": " +
                                         std::to_string(I.skipped_in_a_row) +
                                         " steps in a row had a non-finite loss or gradient norm "
                                         "(training.max_skipped_steps); the last checkpoint is kept as it was");
            }
        }
        if (metrics) {
            auto one_step = metrics->hold_scrapes();  // a scrape sees this step's values together
            metrics->set_step(s);
            metrics->set_loss(loss);
            metrics->set_learning_rate(lr);
            metrics->set_grad_norm(norm);
            metrics->add_tokens(double(I.tokens_per_step()));
            metrics->observe_step_seconds(step_s);
            report_memory();
            if (const HostOffload* off = I.adam->offload(); off && updated) {
                const OffloadTimes& t = off->last_times();
                metrics->set_offload_seconds("d2h", t.d2h);
                metrics->set_offload_seconds("host_adam", t.host_adam);
                metrics->set_offload_seconds("h2d", t.h2d);
                metrics->set_offload_seconds("wall", t.wall);
            }
        }
        if (s % rc.log_interval == 0 || s == I.start_step + 1 || s == max_steps) {
            StepStats st;
            st.step = s;
            st.max_steps = max_steps;
            st.loss = loss;
            st.lr = lr;
            st.grad_norm = norm;
            st.tokens_per_second = double(window_steps * I.tokens_per_step()) / window_train_s;
            st.mfu = fpt * st.tokens_per_second / (peak * I.topo.world_size());  // every rank: pp x dp
            st.elapsed_seconds = seconds_since(t_start);
            st.eta_seconds = train_seconds / double(s - I.start_step) * double(max_steps - s);
            log.line(format_step_line(st));
            if (metrics) {
                metrics->set_tokens_per_second(st.tokens_per_second);
                metrics->set_mfu(st.mfu);
            }
            window_steps = 0;
            window_train_s = 0;
        }
        if (rc.eval_interval > 0 && (s % rc.eval_interval == 0 || s == max_steps)) {
            const float vl = I.evaluate();
            log.val_record(s, vl);
            char buf[64];
            std::snprintf(buf, sizeof buf, "val loss %.4f", vl);
            log.line("step " + std::to_string(s) + "/" + std::to_string(max_steps) + " | " + buf);
            if (metrics) metrics->set_val_loss(vl);
        }
        if (I.hellaswag && (s % rc.eval_hellaswag_interval == 0 || s == max_steps))  // app/hellaswag_eval.hpp
            HellaSwagInLoop::report(s, max_steps, I.hellaswag->evaluate(*I.gpt, I.pipe.get(), I.last_stage(),
                                                                        I.topo.tp_index() == 0, I.comm), log, metrics);
        // ZeRO-3 gathers the weights for every forward, so its whole group samples in step (every
        // rank draws the same tokens: same gathered weights, same RNG); so does rank 0's pipeline,
        // every stage of it, the last stage's logits broadcast to all; rank 0 prints.
        // With tp > 1 rank 0's whole TP group samples (its logits are gathered over the group).
        const bool samples_here = I.rank == 0 || (I.cfg.parallel.zero_stage == 3 && I.topo.replica() == 0) ||
                                  ((I.pipe || I.topo.tp() > 1) && I.topo.replica() == 0 && I.topo.zero_index() == 0);
        if (rc.sample_interval > 0 && s % rc.sample_interval == 0 && samples_here) {
            const int eos = I.train->info().eos_id;
            std::vector<int32_t> ids;
            if (I.pipe) {
                const LogitsAt logits = [&](const int* in, int pos) {
                    std::vector<float> l = I.pipe->logits_at(in, pos);
                    l.resize(size_t(I.gcfg.vocab_size));
                    I.stage_comm->broadcast(l.data(), l.size(), DType::f32, I.topo.pp() - 1);
                    return l;
                };
                ids = generate(logits, I.B, I.T, eos, rc.sample_tokens, rc.sample_top_k, rc.sample_temperature,
                               I.sampler_rng);
            } else {
                ids = generate(*I.gpt, eos, rc.sample_tokens, rc.sample_top_k, rc.sample_temperature, I.sampler_rng);
            }
            if (I.rank == 0) log.line("sample at step " + std::to_string(s) + ": " + I.tokenizer->decode(ids));
        }
        // Every rank must agree to stop at the same step, and on the state of the checkpoint
        // writers (CheckpointSaver::poll): the max of the flags over the ranks.
        float flags[2] = {g_stop_signal != 0 ? 1.0f : 0.0f, I.saver->status()};
        if (I.topo.world_size() > 1) I.comm.all_reduce_max(flags, 2);
        I.saver->poll(flags[1], log, metrics);
        const float stop = flags[0];
        const int interval = I.cfg.checkpoint.interval;
        if ((interval > 0 && s % interval == 0) || s == max_steps || stop > 0) I.save(log, metrics);
        if (stop > 0 || s == max_steps) I.saver->complete(log, metrics);  // the last one is written before the end
        if (stop > 0) {
            log.line(std::string("stopping after step ") + std::to_string(s) + " on " +
                     (g_stop_signal == SIGINT ? "SIGINT" : g_stop_signal == SIGTERM ? "SIGTERM" : "a peer's signal"));
            return;
        }
    }
    // Every rank's device peak (the Allocator's, host excluded): what --dry-run and llmtrain-plan predict.
    const int world = I.topo.world_size(), dp = I.topo.dp();
    std::vector<float> peaks(size_t(world), 0.0f);  // MiB
    peaks[size_t(I.rank)] = float(double(I.alloc->peak_total()) / 1048576.0);
    if (world > 1) I.comm.all_reduce_max(peaks.data(), peaks.size());
    std::string line = "peak device memory (MiB):";
    char buf[64];
    for (int r = 0; r < world; ++r) {
        std::snprintf(buf, sizeof buf, "%s rank %d (stage %d) %.2f", r ? "," : "", r, r / (dp * I.topo.tp()), double(peaks[size_t(r)]));
        line += buf;
    }
    log.line(line);
}

}  // namespace llmtrain
