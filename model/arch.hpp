// model/arch.hpp — the architecture description: what a transformer block of each model.arch is
// built from, and every tensor it holds.
//
// docs/model.md "Architectures": a model is the same stack for every architecture (token
// embedding, a range of layers, a final norm, the LM head and the loss); an architecture chooses
// the block's pieces — the norm, the positions, the attention's key/value heads and the MLP — and
// names and shapes its tensors. Everything that depends on the architecture asks this description:
// ParamLayout (units, names, shapes, TP splits, init), the GPT's forward/backward (which op runs
// for each piece), the FLOPs per token and the pipeline's layer costs, the config's and the
// planner's tensor-parallel checks. A new architecture is a new description plus its ops.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/param_layout.hpp"

namespace llmtrain {

enum class NormKind : uint8_t {
    layernorm,  ///< (x - mean) * rstd * w + b, eps 1e-5 (Ba et al. 2016)
    rmsnorm,    ///< x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) (Zhang & Sennrich 2019)
};
enum class PosKind : uint8_t {
    learned,  ///< a (seq_len, C) table added to the token embedding (wpe)
    rotary,   ///< q and k rotated by their position, HuggingFace's rotate-half pairs (Su et al. 2021)
};
enum class MlpKind : uint8_t {
    gelu,    ///< fc (F) -> GELU(tanh) -> proj, F = 4C
    swiglu,  ///< [gate | up] (2F) -> silu(gate) * up -> down (Shazeer 2020)
};

/// One tensor as the architecture names, shapes and splits it (the whole tensor, tp = 1).
struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;   ///< full shape, row-major; (OC, C) for linear weights
    TPSplit split = TPSplit::replicated;
    int blocks = 1;               ///< column split: equal row blocks each cut over the TP group
    bool decay = false;           ///< AdamW weight decay (2-D weights)
    TensorRole role = TensorRole::tok_emb;
    TensorInit init = TensorInit::zero;
    bool packed = false;          ///< follows the previous tensor with no gap (one fused matrix)
};

/// The resolved description of one model configuration. Built by ArchSpec(cfg), which validates
/// the architecture's keys.
struct ArchSpec {
    /// Errors: std::invalid_argument naming the key: a non-positive size, model.moe with GPT-2, a
    /// top_k outside [1, n_experts], a negative shared-expert count or expert_ffn, n_embd not a multiple of
    /// n_head, n_kv_head not dividing n_head, an odd head size with rotary positions, a
    /// non-positive intermediate_size / multiple_of / norm_eps / rope_theta, a negative head_dim, and for
    /// GPT-2 any Llama key set away from GPT-2's values (n_kv_head, intermediate_size, tie_embeddings =
    /// false, head_dim, qk_norm). With head_dim > 0 n_embd need not be a multiple of n_head.
    explicit ArchSpec(const GPTConfig& cfg);

    GPTConfig cfg;
    NormKind norm = NormKind::layernorm;
    PosKind pos = PosKind::learned;
    MlpKind mlp = MlpKind::gelu;
    bool bias = true;   ///< linear layers and norms have biases
    bool tied = true;   ///< the LM head is the token table (unit 0); else lm_head.weight in the final unit
    bool qk_norm = false;  ///< Qwen3's RMSNorm of each q and k head before the rotation (GPTConfig::qk_norm)
    float norm_eps = 1e-5f;
    float rope_theta = 10000.0f;
    int C = 0, NH = 0, NKV = 0, HS = 0;  ///< width, query heads, key/value heads, head size (head_dim or C/NH)
    int F = 0;          ///< MLP hidden width (4C for GPT-2, intermediate_size for Llama)
    /// Mixture of experts (GPTConfig::moe_*): E experts of width Fe, k per token; with E > 0 the
    /// dense MLP tensors are the shared experts' (F = moe_shared_experts * Fe, absent when 0).
    int E = 0, K = 0, Fe = 0;
    bool moe() const { return E > 0; }
    bool dense_mlp() const { return !moe() || F > 0; }  ///< a dense SwiGLU (the MLP or the shared experts)
    int Vp = 0;         ///< padded vocabulary

    /// Columns of the fused attention input projection's output per row on one of tp ranks:
    /// (NH + 2 NKV) / tp heads of HS, laid out [q | k | v] (each by heads).
    int qkv_width(int tp = 1) const { return (NH + 2 * NKV) / tp * HS; }
    /// Columns the MLP's input matmul writes per row on one of tp ranks: F/tp (GELU) or 2F/tp
    /// ([gate | up], SwiGLU).
    int mlp_in_width(int tp = 1) const { return (mlp == MlpKind::swiglu ? 2 : 1) * F / tp; }

    /// The tensors of unit u in layout order (0: embeddings, 1+l: layer l, n_layer+1: the final
    /// norm and an untied head). Inside a unit the 2-D weights come first (AdamW decays them as
    /// one run), then the 1-D ones.
    std::vector<TensorSpec> unit_tensors(int u) const;
    int num_units() const { return cfg.n_layer + 2; }

    /// What a tensor-parallel width must divide, as (what, value) pairs in the order checked:
    /// GPT-2 {n_head, 4 * n_embd, the padded vocabulary Vp}; Llama {n_head, n_kv_head,
    /// intermediate_size, the padded vocabulary Vp}.
    std::vector<std::pair<std::string, int64_t>> tp_divisors() const;

    /// Parameters of one layer (the sum of its tensors' elements, tp = 1, no padding).
    int64_t layer_params() const;
    /// Parameters of the embedding unit that cost matmul FLOPs in the 6N count: GPT-2's wpe (the
    /// llm.c convention counts it); none for Llama (its table is a lookup; tied, it is counted once
    /// as the head).
    int64_t embedding_flop_params() const;
    /// Parameters the head costs: the (Vp, C) LM head matmul and the final norm.
    int64_t head_params() const;
    /// Parameters the 6N count leaves out: an untied Llama's input table (a lookup), and with MoE
    /// the experts a token does not visit, n_layer (E - k) 3 Fe C (the count is of ACTIVE
    /// parameters per token); else 0.
    int64_t flop_free_params() const;
    /// With MoE the parameters of the experts a token does not visit, n_layer (E - k) 3 Fe C (total
    /// minus this = the ACTIVE parameters per token, embeddings included, as OLMoE and Mixtral count
    /// them); 0 for a dense model.
    int64_t idle_expert_params() const;
    /// Training FLOPs per token, forward + backward without recomputation (docs/reference.md
    /// "Training FLOPs and MFU"): 6 (N - flop_free_params()) + 6 n_layer T NH HS, the second term
    /// the attention's score and value products (query heads: GQA shrinks K/V projections, not these).
    double flops_per_token(size_t num_parameters, int T) const;
};

/// "model.arch" value -> Arch. Errors: std::invalid_argument for anything but "gpt2" / "llama".
Arch parse_arch(const std::string& s);

/// Llama's default MLP width: floor(8 n_embd / 3) rounded up to a multiple of multiple_of
/// (Touvron et al. 2023's 2/3 of 4 n_embd).
int default_intermediate_size(int n_embd, int multiple_of);

}  // namespace llmtrain
