// model/arch.cpp — the GPT-2 and Llama descriptions (see arch.hpp; docs/model.md "Architectures").
//
// GPT-2's tensors, names and order are those the layout always had (checkpoints of every earlier
// run load unchanged). Llama's follow HuggingFace's LlamaForCausalLM names, with the token table
// and an untied head padded to Vp rows like GPT-2's wte.
#include "model/arch.hpp"

#include <stdexcept>

namespace llmtrain {

namespace {

[[noreturn]] void bad(const std::string& msg) { throw std::invalid_argument(msg); }

std::string num(double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

}  // namespace

const char* arch_name(Arch a) { return a == Arch::llama ? "llama" : "gpt2"; }

Arch parse_arch(const std::string& s) {
    if (s == "gpt2") return Arch::gpt2;
    if (s == "llama") return Arch::llama;
    bad("model.arch: expected \"gpt2\" or \"llama\", got \"" + s + "\"");
}

int default_intermediate_size(int n_embd, int multiple_of) {
    const int64_t hidden = 8 * int64_t(n_embd) / 3;
    return int((hidden + multiple_of - 1) / multiple_of * multiple_of);
}

ArchSpec::ArchSpec(const GPTConfig& c) : cfg(c) {
    if (c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 || c.seq_len <= 0 || c.vocab_size <= 0)
        bad("GPTConfig: n_layer, n_head, n_embd, seq_len and vocab_size must be positive");
    if (c.head_dim < 0) bad("model.head_dim: expected >= 0 (0 = n_embd / n_head), got " + std::to_string(c.head_dim));
    if (c.head_dim == 0 && c.n_embd % c.n_head != 0)
        bad("GPTConfig: n_embd (" + std::to_string(c.n_embd) + ") must be divisible by n_head (" +
            std::to_string(c.n_head) + ")");
    C = c.n_embd;
    NH = c.n_head;
    HS = c.head_dim > 0 ? c.head_dim : C / NH;
    Vp = c.padded_vocab_size();
    NKV = c.n_kv_head > 0 ? c.n_kv_head : NH;
    if (c.n_kv_head < 0 || NH % NKV != 0)
        bad("model.n_kv_head: expected a divisor of model.n_head (" + std::to_string(NH) + ") or 0, got " +
            std::to_string(c.n_kv_head));
    if (c.intermediate_size < 0) bad("model.intermediate_size: expected >= 0, got " + std::to_string(c.intermediate_size));
    if (c.moe_experts < 0) bad("model.moe.n_experts: expected >= 0, got " + std::to_string(c.moe_experts));
    if (c.arch == Arch::gpt2) {
        if (c.moe_experts > 0)
            bad("model.moe.n_experts: mixture of experts needs model.arch = \"llama\" (its SwiGLU experts), got " +
                std::to_string(c.moe_experts) + " with \"gpt2\"");
        if (NKV != NH)
            bad("model.n_kv_head: expected 0 or model.n_head (" + std::to_string(NH) +
                ") with model.arch = \"gpt2\" (grouped-query attention is Llama's), got " + std::to_string(c.n_kv_head));
        if (c.intermediate_size != 0 && c.intermediate_size != 4 * C)
            bad("model.intermediate_size: expected 0 or 4 x model.n_embd (" + std::to_string(4 * C) +
                ") with model.arch = \"gpt2\", got " + std::to_string(c.intermediate_size));
        if (!c.tie_embeddings)
            bad("model.tie_embeddings: expected true with model.arch = \"gpt2\" (its LM head is wte), got false");
        if (c.qk_norm) bad("model.qk_norm: QK-norm is a Llama-family piece (Qwen3's); expected false with model.arch = \"gpt2\"");
        if (c.head_dim != 0 && (C % NH != 0 || c.head_dim != C / NH))
            bad("model.head_dim: expected 0 or n_embd / n_head (" + std::to_string(C / NH) +
                ") with model.arch = \"gpt2\", got " + std::to_string(c.head_dim));
        F = 4 * C;
        return;
    }
    // Llama
    if (c.multiple_of < 1) bad("model.multiple_of: expected an integer >= 1, got " + std::to_string(c.multiple_of));
    if (!(c.norm_eps > 0.0f)) bad("model.norm_eps: expected a number > 0, got " + num(c.norm_eps));
    if (!(c.rope_theta > 0.0f)) bad("model.rope_theta: expected a number > 0, got " + num(c.rope_theta));
    if (HS % 2 != 0)
        bad(c.head_dim > 0 ? "model.head_dim: rotary positions turn pairs of channels, so it must be even, got " +
                                 std::to_string(HS)
                           : "model.n_head: rotary positions turn pairs of channels, so the head size model.n_embd / "
                             "model.n_head = " + std::to_string(C) + " / " + std::to_string(NH) + " = " +
                                 std::to_string(HS) + " must be even");
    norm = NormKind::rmsnorm;
    pos = PosKind::rotary;
    mlp = MlpKind::swiglu;
    bias = false;
    tied = c.tie_embeddings;
    qk_norm = c.qk_norm;
    norm_eps = c.norm_eps;
    rope_theta = c.rope_theta;
    F = c.intermediate_size > 0 ? c.intermediate_size : default_intermediate_size(C, c.multiple_of);
    if (c.moe_experts == 0) return;
    if (c.moe_top_k < 1 || c.moe_top_k > c.moe_experts)
        bad("model.moe.top_k: expected 1..model.moe.n_experts (" + std::to_string(c.moe_experts) + "), got " +
            std::to_string(c.moe_top_k));
    if (c.moe_shared_experts < 0)
        bad("model.moe.n_shared_experts: expected >= 0, got " + std::to_string(c.moe_shared_experts));
    if (c.moe_expert_ffn < 0) bad("model.moe.expert_ffn: expected >= 0, got " + std::to_string(c.moe_expert_ffn));
    if (!(c.moe_aux_loss_coef >= 0.0f))
        bad("model.moe.aux_loss_coef: expected a number >= 0, got " + num(c.moe_aux_loss_coef));
    E = c.moe_experts;
    K = c.moe_top_k;
    Fe = c.moe_expert_ffn > 0 ? c.moe_expert_ffn : F;
    F = c.moe_shared_experts * Fe;  // the shared experts as one dense SwiGLU; 0: none
}

std::vector<TensorSpec> ArchSpec::unit_tensors(int u) const {
    if (u < 0 || u >= num_units())
        throw std::out_of_range("ArchSpec: unit " + std::to_string(u) + " outside [0, " + std::to_string(num_units()) + ")");
    using R = TensorRole;
    using I = TensorInit;
    const int64_t c = C, vp = Vp, f = F;
    std::vector<TensorSpec> t;
    auto add = [&](std::string name, std::vector<int64_t> shape, TensorRole role, TensorInit init,
                   TPSplit split = TPSplit::replicated, int blocks = 1, bool packed = false) {
        const bool decay = shape.size() >= 2;  // matrices (and the experts' stacks of them)
        t.push_back({std::move(name), std::move(shape), split, blocks, decay, role, init, packed});
    };
    const int L = cfg.n_layer;
    if (cfg.arch == Arch::gpt2) {
        if (u == 0) {
            add("wte", {vp, c}, R::tok_emb, I::normal, TPSplit::vocab);
            add("wpe", {int64_t(cfg.seq_len), c}, R::pos_emb, I::normal);
        } else if (u <= L) {
            const std::string p = "h." + std::to_string(u - 1) + ".";
            add(p + "attn.c_attn.weight", {3 * c, c}, R::qkv_w, I::normal, TPSplit::column, 3);  // q|k|v, each by heads
            add(p + "attn.c_proj.weight", {c, c}, R::proj_w, I::normal_residual, TPSplit::row);
            add(p + "mlp.c_fc.weight", {4 * c, c}, R::fc_w, I::normal, TPSplit::column);
            add(p + "mlp.c_proj.weight", {c, 4 * c}, R::fcproj_w, I::normal_residual, TPSplit::row);
            add(p + "ln_1.weight", {c}, R::norm1_w, I::one);
            add(p + "ln_1.bias", {c}, R::norm1_b, I::zero);
            add(p + "attn.c_attn.bias", {3 * c}, R::qkv_b, I::zero, TPSplit::column, 3);
            add(p + "attn.c_proj.bias", {c}, R::proj_b, I::zero);  // added once, after the row-parallel sum
            add(p + "ln_2.weight", {c}, R::norm2_w, I::one);
            add(p + "ln_2.bias", {c}, R::norm2_b, I::zero);
            add(p + "mlp.c_fc.bias", {4 * c}, R::fc_b, I::zero, TPSplit::column);
            add(p + "mlp.c_proj.bias", {c}, R::fcproj_b, I::zero);
        } else {
            add("ln_f.weight", {c}, R::normf_w, I::one);
            add("ln_f.bias", {c}, R::normf_b, I::zero);
        }
        return t;
    }
    // Llama (HuggingFace's names). q|k|v and gate|up are packed: one matmul each.
    const int64_t q = int64_t(NH) * HS, kv = int64_t(NKV) * HS;
    if (u == 0) {
        add("model.embed_tokens.weight", {vp, c}, R::tok_emb, I::normal, TPSplit::vocab);
    } else if (u <= L) {
        const std::string p = "model.layers." + std::to_string(u - 1) + ".";
        add(p + "self_attn.q_proj.weight", {q, c}, R::qkv_w, I::normal, TPSplit::column);
        add(p + "self_attn.k_proj.weight", {kv, c}, R::k_w, I::normal, TPSplit::column, 1, true);
        add(p + "self_attn.v_proj.weight", {kv, c}, R::v_w, I::normal, TPSplit::column, 1, true);
        add(p + "self_attn.o_proj.weight", {c, q}, R::proj_w, I::normal_residual, TPSplit::row);
        if (moe()) {  // Mixtral's router and experts, the experts stacked (E, rows, cols), never split by TP
            const int64_t e = E, fe = Fe;
            add(p + "mlp.router.weight", {e, c}, R::moe_router, I::normal);
            add(p + "mlp.experts.gate_up_proj", {e, 2 * fe, c}, R::moe_w13, I::normal);  // per expert [w1; w3]
            add(p + "mlp.experts.down_proj", {e, c, fe}, R::moe_w2, I::normal_residual);
        }
        if (dense_mlp()) {  // the dense MLP, or with MoE the shared experts' (width n_shared * Fe)
            const std::string m = p + (moe() ? "mlp.shared_experts." : "mlp.");
            add(m + "gate_proj.weight", {f, c}, R::fc_w, I::normal, TPSplit::column);
            add(m + "up_proj.weight", {f, c}, R::up_w, I::normal, TPSplit::column, 1, true);
            add(m + "down_proj.weight", {c, f}, R::fcproj_w, I::normal_residual, TPSplit::row);
        }
        add(p + "input_layernorm.weight", {c}, R::norm1_w, I::one);
        add(p + "post_attention_layernorm.weight", {c}, R::norm2_w, I::one);
        if (qk_norm) {  // Qwen3's per-head RMSNorm weights, shared by the heads (replicated under TP)
            add(p + "self_attn.q_norm.weight", {int64_t(HS)}, R::q_norm_w, I::one);
            add(p + "self_attn.k_norm.weight", {int64_t(HS)}, R::k_norm_w, I::one);
        }
    } else {
        if (!tied) add("lm_head.weight", {vp, c}, R::lm_head, I::normal, TPSplit::vocab);
        add("model.norm.weight", {c}, R::normf_w, I::one);
    }
    return t;
}

std::vector<std::pair<std::string, int64_t>> ArchSpec::tp_divisors() const {
    if (cfg.arch == Arch::gpt2) return {{"n_head", NH}, {"4 * n_embd", 4 * int64_t(C)}, {"the padded vocabulary Vp", Vp}};
    return {{"n_head", NH}, {"n_kv_head", NKV}, {"intermediate_size", F}, {"the padded vocabulary Vp", Vp}};
}

int64_t ArchSpec::layer_params() const {
    int64_t n = 0;
    for (const TensorSpec& t : unit_tensors(1)) {
        int64_t k = 1;
        for (int64_t d : t.shape) k *= d;
        n += k;
    }
    return n;
}

int64_t ArchSpec::embedding_flop_params() const {
    return pos == PosKind::learned ? int64_t(cfg.seq_len) * C : 0;
}

int64_t ArchSpec::head_params() const { return int64_t(Vp) * C + (bias ? 2 : 1) * int64_t(C); }

int64_t ArchSpec::flop_free_params() const {
    const int64_t table = cfg.arch == Arch::llama && !tied ? int64_t(Vp) * C : 0;
    return table + idle_expert_params();
}

int64_t ArchSpec::idle_expert_params() const {
    return moe() ? int64_t(cfg.n_layer) * (E - K) * 3 * int64_t(Fe) * C : 0;
}

double ArchSpec::flops_per_token(size_t num_parameters, int T) const {
    const double n = static_cast<double>(num_parameters) - static_cast<double>(flop_free_params());
    return 6.0 * n + 6.0 * cfg.n_layer * static_cast<double>(T) * (double(NH) * HS);
}

}  // namespace llmtrain
