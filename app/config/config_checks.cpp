// app/config/config_checks.cpp — the checks across config keys (see config_checks.hpp), out of
// app/config/config.cpp, which reads and prints the keys one by one.
#include "app/config/config_checks.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "app/config/toml_text.hpp"
#include "model/arch.hpp"
#include "parallel/partition.hpp"
#include "parallel/schedule.hpp"

namespace llmtrain {

namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw ConfigError(where + ": " + what); }

/// parallel.cp > 1 (docs/parallelism.md "Context parallelism"): seq_len splits into 2 cp chunks
/// (any parallel.pp: each stage's CP group splits its windows alike). Samples and HellaSwag run
/// through the CP group's forward (GPT::logit_row, GPT::window_losses), with or without stages.
template <class At>
void check_context_parallel(const Config& c, const At& at) {
    const int cp = c.parallel.cp;
    if (c.model.seq_len % (2 * cp) != 0)
        fail(at({"parallel.cp", "model.seq_len"}),
             "parallel.cp: expected model.seq_len = " + std::to_string(c.model.seq_len) + " to be a multiple of 2 x cp = " +
                 std::to_string(2 * cp) + " (each rank holds two of the 2 x cp chunks of a window), got cp " +
                 std::to_string(cp));
}

/// model.moe.n_experts > 0 (docs/model.md "Mixture of experts"): what the MoE model does not run
/// with yet — FP8. Both backends run it with tp and cp (docs/parallelism.md "Mixture of experts under
/// tp and cp"; on cuda checked by tests/cuda/emu_moe_tp_cp.sh) and in a pipeline (tests/cuda/emu_moe_pp.sh;
/// issue 45).
/// (The architecture's own MoE rules, llama only and top_k in 1..n_experts, are ArchSpec's.)
template <class At>
void check_moe(const Config& c, const At& at) {
    const std::string n = std::to_string(c.moe.n_experts);
    if (c.moe.bias_update_rate > 0.0f && c.moe.router != "sigmoid")
        fail(at({"model.moe.bias_update_rate", "model.moe.router"}),
             "model.moe.bias_update_rate: the selection bias (DeepSeek-V3's auxiliary-loss-free balancing) "
             "needs model.moe.router = \"sigmoid\", got bias_update_rate = " + std::to_string(c.moe.bias_update_rate) +
                 " with router = " + quote(c.moe.router));
    if (c.training.fp8 != "off")
        fail(at({"model.moe.n_experts", "training.fp8"}),
             "model.moe.n_experts: mixture of experts does not run with training.fp8 yet, got n_experts = " + n +
                 " with training.fp8 = " + quote(c.training.fp8));
}

/// parallel.ep > 1 (docs/parallelism.md "Expert parallelism"): a mixture of experts whose
/// n_experts ep divides, and not with what it does not run with yet: HellaSwag in the loop (its
/// ranks score different examples, so the ep group's exchanges would not pair up). (dp is known
/// at start-up: resolve_world checks that ep divides it, each pipeline stage has its own ep groups
/// of its dp ranks. Both backends run it: on cuda the exchange is NcclComm's grouped all_to_all_v.)
template <class At>
void check_expert_parallel(const Config& c, const At& at) {
    const std::string ep = std::to_string(c.parallel.ep);
    if (c.moe.n_experts == 0)
        fail(at({"parallel.ep", "model.moe.n_experts"}),
             "parallel.ep: expert parallelism needs a mixture of experts ([model.moe] n_experts > 0), got ep = " + ep);
    if (c.moe.n_experts % c.parallel.ep != 0)
        fail(at({"parallel.ep", "model.moe.n_experts"}),
             "parallel.ep: expected a divisor of model.moe.n_experts = " + std::to_string(c.moe.n_experts) + ", got " +
                 ep);
    if (c.run.eval_hellaswag_interval > 0)
        fail(at({"parallel.ep", "run.eval_hellaswag_interval"}),
             "parallel.ep: HellaSwag in the loop does not run with expert parallelism yet, got ep = " + ep +
                 " with run.eval_hellaswag_interval = " + std::to_string(c.run.eval_hellaswag_interval));
}

}  // namespace

void check_across_keys(const Config& c, const ConfigOrigins& origins, const std::string& file) {
    const auto at = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
            if (auto it = origins.find(k); it != origins.end()) return it->second;
        return file.empty() ? std::string("(built-in defaults)") : file;
    };
    if (!c.run.trace.empty() && (c.run.trace.size() != 2 || c.run.trace[0] > c.run.trace[1]))
        fail(at({"run.trace"}), "run.trace: expected [first, last] steps with first <= last, got " +
                                    std::to_string(c.run.trace.size()) + " entries");
    if (!c.data.sources.empty() && origins.count("data.train"))
        fail(at({"data.train"}), "data.train: not used beside data.sources (a mixture); give one or the other "
                                 "(a single file is a mixture of one: [[data.sources]] with its name and path)");
    if (const auto& ls = c.lr_schedule; ls.decay == "wsd") {
        // WSD's decay takes the last round(decay_ratio * max_steps) steps (optim/lr_schedule.hpp).
        const long decay = std::lround(double(ls.decay_ratio) * double(c.run.max_steps));
        if (ls.warmup_steps + decay > c.run.max_steps)
            fail(at({"lr_schedule.decay_ratio", "lr_schedule.warmup_steps", "run.max_steps"}),
                 "lr_schedule.decay_ratio: warmup_steps (" + std::to_string(ls.warmup_steps) + ") + the decay's " +
                     std::to_string(decay) + " steps (decay_ratio x max_steps) exceed run.max_steps (" +
                     std::to_string(c.run.max_steps) + ")");
    }
    const auto& m = c.model;
    if (m.head_dim == 0 && m.n_embd % m.n_head != 0)
        fail(at({"model.n_head", "model.n_embd"}), "model.n_head: expected a divisor of model.n_embd (" +
                                                       std::to_string(m.n_embd) + "), got " +
                                                       std::to_string(m.n_head));
    // The architecture's own keys (model/arch.hpp): n_kv_head dividing n_head, an even head size
    // for rotary positions, GPT-2 keeping its fixed pieces; the message starts with the key at fault.
    try {
        (void)ArchSpec(gpt_config_of(c));
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what(), key = what.substr(0, what.find(':'));
        fail(at({key.c_str(), "model.arch"}), what);
    }
    if (m.qk_norm && c.parallel.tp > 1)
        fail(at({"model.qk_norm", "parallel.tp"}), "model.qk_norm: tensor parallelism is not supported with QK-norm yet "
             "(its weights' gradients would need a sum over the heads' ranks), got parallel.tp = " +
             std::to_string(c.parallel.tp));
    if (m.arch == "gpt2" && m.norm_eps != ModelConfig{}.norm_eps)
        fail(at({"model.norm_eps", "model.arch"}), "model.norm_eps: expected " + value_text(ModelConfig{}.norm_eps) +
             " with model.arch = \"gpt2\" (its LayerNorm's epsilon is fixed), got " + value_text(m.norm_eps));
    if (m.arch == "gpt2" && m.rope_theta != ModelConfig{}.rope_theta)
        fail(at({"model.rope_theta", "model.arch"}), "model.rope_theta: expected 10000 with model.arch = \"gpt2\" "
             "(it has learned positions, no rotary ones), got " + value_text(m.rope_theta));
    if (c.run.sample_top_k > m.vocab_size)
        fail(at({"run.sample_top_k", "model.vocab_size"}),
             "run.sample_top_k: expected an integer in [1, model.vocab_size = " + std::to_string(m.vocab_size) +
                 "], got " + std::to_string(c.run.sample_top_k));
    if (c.lr_schedule.min_lr > c.optimizer.lr)
        fail(at({"lr_schedule.min_lr", "optimizer.lr"}),
             "lr_schedule.min_lr: expected a number in [0, optimizer.lr = " + value_text(c.optimizer.lr) +
                 "], got " + value_text(c.lr_schedule.min_lr));
    if (c.run.backend == "cpu" && c.training.precision != "fp32")
        fail(at({"training.precision", "run.backend"}),
             "training.precision: expected \"fp32\" with run.backend = \"cpu\" (bf16 needs the cuda backend), got " +
                 quote(c.training.precision));
    if (c.training.stochastic_rounding && c.training.precision != "bf16")
        fail(at({"training.stochastic_rounding", "training.precision"}),
             "training.stochastic_rounding: expected false with training.precision = " + quote(c.training.precision) +
                 " (it rounds fp32 master weights to bf16 params), got true");
    if (c.run.backend == "cpu" && c.parallel.comm == "nccl")
        fail(at({"parallel.comm", "run.backend"}),
             "parallel.comm: expected \"auto\" or \"mpi\" with run.backend = \"cpu\" (NCCL moves device buffers "
             "of the cuda backend), got \"nccl\"");
    if (c.run.backend == "cpu" && m.attention != "native" && m.attention != "auto")
        fail(at({"model.attention", "run.backend"}),
             "model.attention: expected \"auto\" or \"native\" with run.backend = \"cpu\" (cublas and cudnn need the "
             "cuda backend), got " + quote(m.attention));
    // dp is known only at start-up (resolve_batch); what does not depend on it is checked here.
    const auto& t = c.training;
    const int64_t per_rank = int64_t(t.micro_batch_size) * std::max(t.grad_accum_steps, 1);
    if (t.global_batch_size > 0 && t.global_batch_size % per_rank != 0)
        fail(at({"training.global_batch_size", "training.micro_batch_size", "training.grad_accum_steps"}),
             "training.global_batch_size: expected a multiple of micro_batch_size x grad_accum_steps = " +
                 std::to_string(per_rank) + ", got " + std::to_string(t.global_batch_size));
    // The pipeline: stage_plan checks the per-stage lists against parallel.pp and model.n_layer (the
    // balanced split, for counts checked against it, uses micro_batch_size and seq_len); its message
    // starts with the key at fault, which is where the error points.
    const auto& p = c.parallel;
    try {
        stage_plan(gpt_config_of(c), t.micro_batch_size, m.seq_len, p.pp, c.pipeline.layers_per_stage,
                   c.activation_checkpoint.ratio, c.activation_checkpoint.ratio_per_stage,
                   c.activation_checkpoint.layers_per_stage);
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what(), key = what.substr(0, what.find_first_of("[:"));
        fail(at({key.c_str(), "parallel.pp", "model.n_layer"}), what);
    }
    if (c.pipeline.plan == "auto") {
        const std::pair<const char*, bool> lists[] = {
            {"pipeline.layers_per_stage", !c.pipeline.layers_per_stage.empty()},
            {"activation_checkpoint.layers_per_stage", !c.activation_checkpoint.layers_per_stage.empty()},
            {"activation_checkpoint.ratio_per_stage", !c.activation_checkpoint.ratio_per_stage.empty()}};
        for (const auto& [key, set] : lists)
            if (set)
                fail(at({key, "pipeline.plan"}), std::string(key) + ": expected [] with pipeline.plan = \"auto\" "
                     "(the planner chooses it), got a list");
    }
    // Tensor parallelism splits what the architecture says (ArchSpec::tp_divisors: query heads,
    // key/value heads, the MLP's hidden width, the padded vocabulary) over tp ranks: each must divide evenly.
    if (p.tp > 1) {
        struct Named {
            const char *name, *key, *what;
        };
        static const Named names[] = {
            {"n_head", "model.n_head", "model.n_head"},
            {"n_kv_head", "model.n_kv_head", "model.n_kv_head (0 = model.n_head)"},
            {"4 * n_embd", "model.n_embd", "4 x model.n_embd (the MLP's hidden width)"},
            {"intermediate_size", "model.intermediate_size", "model.intermediate_size (the MLP's hidden width)"},
            {"the padded vocabulary Vp", "model.vocab_size",
             "the padded vocabulary (model.vocab_size rounded up to a multiple of 128)"}};
        for (const auto& [name, n] : ArchSpec(gpt_config_of(c)).tp_divisors()) {
            const Named* d = &names[0];
            for (const Named& x : names)
                if (name == x.name) d = &x;
            if (n % p.tp != 0)
                fail(at({"parallel.tp", d->key}), "parallel.tp: expected a divisor of " + std::string(d->what) + " = " +
                                                      std::to_string(n) + ", got " + std::to_string(p.tp));
        }
    }
    if (p.sequence_parallel && p.tp == 1)
        fail(at({"parallel.sequence_parallel", "parallel.tp"}),
             "parallel.sequence_parallel: expected false with parallel.tp = 1 (it shards the rows over the TP group), "
             "got true");
    if (p.sequence_parallel && int64_t(t.micro_batch_size) * m.seq_len % p.tp != 0)
        fail(at({"parallel.sequence_parallel", "training.micro_batch_size", "model.seq_len", "parallel.tp"}),
             "parallel.sequence_parallel: expected micro_batch_size x seq_len = " +
                 std::to_string(int64_t(t.micro_batch_size) * m.seq_len) + " to be a multiple of parallel.tp = " +
                 std::to_string(p.tp) + " (each TP rank holds 1/tp of the rows), got true");
    if (p.cp > 1) check_context_parallel(c, at);
    if (c.moe.n_experts > 0) check_moe(c, at);
    if (p.ep > 1) check_expert_parallel(c, at);
    if (p.pp > 1 && p.zero_stage >= 2)
        fail(at({"parallel.zero_stage", "parallel.pp"}),
             "parallel.zero_stage: ZeRO-2/3 need one micro-batch's gradients per unit, but a pipeline accumulates "
             "them over micro-batches; use zero_stage 0 or 1 with parallel.pp > 1");
}

}  // namespace llmtrain
