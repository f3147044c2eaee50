// model/param_layout.hpp — every parameter tensor in one flat buffer, cut into units.
//
// docs/design.md "Parameter layout": unit 0 holds the embeddings
// (wte, wpe), unit 1+l holds transformer layer l, unit n_layer+1 holds the final norm (and an
// untied LM head). Which tensors, their names, shapes and TP splits come from the architecture
// description (model/arch.hpp; docs/model.md "Parameter layout"). Each
// unit's slice is padded to a multiple of `shard_multiple` elements so it splits evenly over a ZeRO
// group, and every tensor starts at a multiple of 8 elements (16 bytes in bf16). Checkpoints store
// tensors by name and shape, never by offset, so the padding may change between runs.
// Tensor parallelism (docs/distributed.md "Tensor parallelism"): with tp > 1 the layout is one TP rank's
// — every tensor has its local shape, and records its full shape and how it is split (TPSplit), so
// units, ZeRO shards and AdamW work on the local buffer unchanged and checkpoints can still go by
// full name and shape (cut_local / place_local).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llmtrain {

/// The model family (model.arch): which pieces a transformer block is built from
/// (model/arch.hpp describes each).
enum class Arch : uint8_t {
    gpt2,   ///< learned positions, pre-LayerNorm, GELU MLP, biases, tied LM head (Radford et al. 2019)
    llama,  ///< RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases (Touvron et al. 2023)
};

/// "gpt2" or "llama".
const char* arch_name(Arch a);

/// Model hyperparameters. seq_len is the maximum context (rows of wpe for GPT-2, the longest rotary
/// position for Llama). The fields after vocab_size matter for Arch::llama only (GPT-2 has
/// n_kv_head = n_head, a 4*n_embd MLP, LayerNorm eps 1e-5 and a tied head: model/arch.hpp).
struct GPTConfig {
    int n_layer = 4;
    int n_head = 4;
    int n_embd = 256;
    int seq_len = 256;
    int vocab_size = 8192;
    Arch arch = Arch::gpt2;
    int n_kv_head = 0;           ///< key/value heads (grouped-query attention), dividing n_head; 0 = n_head
    int intermediate_size = 0;   ///< the SwiGLU hidden width F; 0 = 8/3 n_embd rounded up to multiple_of
    int multiple_of = 256;       ///< rounding of the default intermediate_size
    float norm_eps = 1e-5f;      ///< RMSNorm epsilon
    float rope_theta = 10000.0f; ///< rotary base: channel pair i of a head turns by t * theta^(-2i/head_size)
    bool tie_embeddings = true;  ///< the LM head is the token embedding (false: its own lm_head.weight)
    /// Attention head size (Qwen3's head_dim, decoupled from the width): q_proj is (n_head * head_dim,
    /// n_embd); 0 = n_embd / n_head.
    int head_dim = 0;
    /// Qwen3's QK-norm: an RMSNorm over head_dim of each q and k head (weights self_attn.q_norm and
    /// k_norm, (head_dim) each, shared by the heads) after the projections, before the rotation.
    bool qk_norm = false;
    /// Mixture of experts (model.moe; docs/model.md "Mixture of experts"), Llama only: every block's
    /// dense MLP becomes a router over moe_experts SwiGLU experts of width moe_expert_ffn (0 = the
    /// dense width F), moe_top_k of them per token, plus moe_shared_experts always-on experts (one
    /// dense SwiGLU of width moe_shared_experts * expert width, DeepSeek-V3's shared experts).
    /// moe_experts = 0: a dense model.
    int moe_experts = 0;
    int moe_top_k = 2;
    int moe_shared_experts = 0;
    int moe_expert_ffn = 0;
    bool moe_sigmoid = false;        ///< router scores: sigmoid (DeepSeek-V3) instead of softmax (Mixtral)
    float moe_aux_loss_coef = 0.01f; ///< alpha of the load-balancing loss (model/moe.hpp moe_aux_loss)
    /// Capacity factor c: each expert takes at most ceil(c * B*T * top_k / E) (token, slot) pairs of a
    /// micro-batch, the rest dropped (model/moe.hpp moe_dispatch_plan_capped); 0 = dropless.
    float moe_capacity_factor = 0.0f;
    /// vocab_size rounded up to a multiple of 128 (the wte rows; padded logits are excluded from the loss).
    int padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }
    friend bool operator==(const GPTConfig&, const GPTConfig&) = default;
};

/// How a tensor is split over the tp ranks of a tensor-parallel group (Megatron-LM's names,
/// Shoeybi et al. 2019). Rows are the first dimension (output channels of a linear weight).
enum class TPSplit : uint8_t {
    replicated,  ///< every rank holds the whole tensor (LayerNorms, wpe, row-parallel biases)
    column,      ///< by output rows, in `blocks` equal blocks (c_attn: q|k|v), each cut in tp parts;
                 ///< rank r holds part r of every block, blocks kept in order (c_attn, c_fc; their biases)
    row,         ///< by input columns: rank r holds columns [r, r+1) * cols/tp (attn.c_proj, mlp.c_proj weights)
    vocab,       ///< by rows of the padded vocabulary: rank r holds rows [r, r+1) * Vp/tp (wte)
};

/// "replicated", "column", "row" or "vocab".
const char* tp_split_name(TPSplit s);

/// What a tensor is for in the computation: the model finds its weights by role, never by name
/// (model/arch.hpp names them per architecture). A fused group (Llama's q|k|v, gate|up) is found by
/// its first tensor's role; the others follow it packed (ParamTensor::packed).
enum class TensorRole : uint8_t {
    tok_emb, pos_emb,                 // unit 0: token table (wte / embed_tokens), learned positions
    norm1_w, norm1_b,                 // a layer's first norm (ln_1 / input_layernorm)
    qkv_w, qkv_b, k_w, v_w,           // attention input projection(s): c_attn, or q_proj then k_proj, v_proj
    proj_w, proj_b,                   // attention output projection (attn.c_proj / o_proj)
    norm2_w, norm2_b,                 // the second norm (ln_2 / post_attention_layernorm)
    fc_w, fc_b, up_w,                 // MLP input: c_fc, or gate_proj then up_proj
    fcproj_w, fcproj_b,               // MLP output (mlp.c_proj / down_proj); with MoE the shared experts'
    moe_router, moe_w13, moe_w2,      // MoE: router (E,C), experts' [gate; up] (E,2Fe,C), down (E,C,Fe)
    normf_w, normf_b, lm_head,        // the final unit: ln_f / model.norm, an untied LM head
    q_norm_w, k_norm_w,               // model.qk_norm: RMSNorm weights (HS) of the q and k heads (Qwen3)
};

/// How init_params draws a tensor (model/gpt_init.cpp): 0, 1, N(0, 0.02), or N(0, 0.02/sqrt(2 n_layer))
/// for the projections that write into the residual stream. Tensors split by vocabulary draw only
/// their vocab_size real rows (padded rows stay 0).
enum class TensorInit : uint8_t { zero, one, normal, normal_residual };

/// One named parameter tensor inside the flat buffer.
struct ParamTensor {
    std::string name;            ///< the architecture's name, e.g. "h.3.attn.c_attn.weight" (model/arch.hpp)
    std::vector<int64_t> shape;  ///< this rank's (local) shape, row-major, (OC, C) for linear weights
    std::vector<int64_t> full_shape;  ///< the whole tensor's shape (equal to shape when tp = 1)
    TPSplit split = TPSplit::replicated;  ///< how the full tensor is cut over the TP group
    int blocks = 1;              ///< column split: equal row blocks each cut over the group (3 for c_attn)
    size_t offset = 0;           ///< first element in the flat buffer
    size_t numel = 0;
    int unit = 0;                ///< unit index (0 embeddings, 1+l layer l, n_layer+1 final LN)
    bool decay = false;          ///< AdamW weight decay applies (2-D weights only)
    TensorRole role = TensorRole::tok_emb;
    TensorInit init = TensorInit::zero;
    /// Placed right after the previous tensor with no alignment gap: q|k|v and gate|up form one
    /// (rows, C) matrix that a single matmul reads (this rank's parts, in this order).
    bool packed = false;
    /// A routed-expert tensor (E, rows, cols) (MoE's moe_w13, moe_w2). With expert parallelism
    /// (ParamLayout's ep > 1) this rank holds experts [ep_rank, ep_rank + 1) * E/ep of it: shape[0]
    /// is E/ep and the part is one contiguous run of the whole tensor (docs/parallelism.md "Expert
    /// parallelism").
    bool expert = false;
};

/// A contiguous, padded range of the flat buffer.
struct ParamUnit {
    size_t offset = 0;  ///< first element
    size_t numel = 0;   ///< padded element count (multiple of shard_multiple)
};

/// A run of a TP rank's part of a tensor inside the whole tensor (ParamLayout::local_runs):
/// `count` elements from element `full` of the whole tensor (row-major, tensor-relative) are
/// the local elements [local, local + count).
struct TPRun {
    size_t full = 0, local = 0, count = 0;
};

/// Elements [offset, offset + numel) of the flat buffer.
struct FlatRange {
    size_t offset = 0;
    size_t numel = 0;
    friend bool operator==(const FlatRange&, const FlatRange&) = default;
};

/// Layout of all parameters (and, identically, of their gradients).
class ParamLayout {
public:
    /// Builds the layout for `cfg` of TP rank tp_rank in a group of tp (tp = 1: the whole model);
    /// each unit is padded to a multiple of shard_multiple (>= 1) elements.
    /// Errors: std::invalid_argument if n_embd % n_head != 0, a size is not positive, the Llama keys
    /// do not fit (ArchSpec), tp_rank is outside [0, tp), or tp does not divide what the
    /// architecture splits (GPT-2: n_head, 4 * n_embd, the padded vocab Vp; naming it).
    explicit ParamLayout(const GPTConfig& cfg, int shard_multiple = 1, int tp = 1, int tp_rank = 0);
    /// The same with expert parallelism: with ep > 1 the routed-expert tensors (ParamTensor::expert)
    /// hold only EP rank ep_rank's n_experts/ep experts; the other tensors are whole, so every EP
    /// rank's layout has the same sizes and offsets. Errors: as above, and std::invalid_argument
    /// naming parallel.ep if ep > 1 without model.moe, ep does not divide n_experts, or ep_rank is
    /// outside [0, ep).
    ParamLayout(const GPTConfig& cfg, int shard_multiple, int tp, int tp_rank, int ep, int ep_rank);

    const std::vector<ParamTensor>& tensors() const { return tensors_; }
    const std::vector<ParamUnit>& units() const { return units_; }
    size_t total_numel() const { return total_; }   ///< padded total, the flat buffer's length
    size_t num_parameters() const { return nparams_; }  ///< real parameters (no padding)
    /// The tensor with this name. Errors: std::out_of_range naming it.
    const ParamTensor& find(const std::string& name) const;
    /// The tensor of `role` in unit u, or null when the architecture has none (Llama's biases).
    const ParamTensor* find_role(int unit, TensorRole role) const;
    int unit_of_layer(int l) const { return 1 + l; }
    /// Rank `rank`'s shard of a group of n ranks (ZeRO, docs/design.md): chunk `rank` of every unit,
    /// units()[u].numel / n elements each, in unit order. Its "shard-local" buffer is these ranges
    /// back to back. Errors: std::invalid_argument if n does not divide every unit (shard_multiple).
    std::vector<FlatRange> shard(int rank, int n) const;
    const GPTConfig& config() const { return cfg_; }
    int tp() const { return tp_; }            ///< size of the tensor-parallel group
    int tp_rank() const { return tp_rank_; }  ///< this layout's rank in it
    int ep() const { return ep_; }            ///< size of the expert-parallel group (1: every expert)
    int ep_rank() const { return ep_rank_; }  ///< this layout's rank in it
    /// Whether every tensor is whole (tp = 1 and ep = 1): flat offsets are the whole model's.
    bool whole() const { return tp_ == 1 && ep_ == 1; }

    /// Copies this rank's part of tensor t out of the whole tensor: full (numel of t.full_shape,
    /// fp32, row-major) -> local (t.numel). Host memory. Replicated tensors are copied whole (an
    /// expert tensor at ep > 1: its EP rank's experts).
    void cut_local(const ParamTensor& t, const float* full, float* local) const;
    /// The inverse: writes local (t.numel) into this rank's part of full (numel of t.full_shape);
    /// the other ranks' parts of full are left as they are.
    void place_local(const ParamTensor& t, const float* local, float* full) const;
    /// The runs holding local elements [l0, l1) of tensor t (tensor-relative, l1 <= t.numel) in
    /// the whole tensor, ascending in both indices (local -> whole is monotone): one run when
    /// tp = 1 or t is replicated (at ep > 1 an expert tensor's run starts at ep_rank x numel).
    /// Reading or drawing a rank's part of a tensor without the whole (app/checkpoint/read_shard.cpp,
    /// model/gpt_init.cpp).
    std::vector<TPRun> local_runs(const ParamTensor& t, size_t l0, size_t l1) const;
    /// Every tensor cut out of a whole-model buffer: full_flat is laid out as `full` (a layout of
    /// the same config with tp = ep = 1, any padding); local_flat (total_numel()) gets each tensor's
    /// local part at its offset, padding untouched. Errors: std::invalid_argument if `full` has
    /// another config or is not whole().
    void cut_local_flat(const ParamLayout& full, const float* full_flat, float* local_flat) const;

private:
    GPTConfig cfg_;
    int tp_ = 1, tp_rank_ = 0;
    int ep_ = 1, ep_rank_ = 0;
    std::vector<ParamTensor> tensors_;
    std::vector<ParamUnit> units_;
    size_t total_ = 0, nparams_ = 0;
};

}  // namespace llmtrain
