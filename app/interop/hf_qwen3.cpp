// app/interop/hf_qwen3.cpp — Qwen3's and Qwen3-MoE's layouts for the Llama with QK-norm (see hf_qwen3.hpp).
#include "app/interop/hf_qwen3.hpp"

#include "app/interop/hf_json.hpp"

namespace llmtrain {

namespace {
using json = nlohmann::ordered_json;
using hf_json::positive;
using hf_json::shortest;
}  // namespace

std::pair<std::string, std::string> hf_family(const ArchSpec& a) {
    if (a.qk_norm) return a.moe() ? std::pair{"qwen3_moe", "Qwen3MoeForCausalLM"} : std::pair{"qwen3", "Qwen3ForCausalLM"};
    return a.moe() ? std::pair{"mixtral", "MixtralForCausalLM"} : std::pair{"llama", "LlamaForCausalLM"};
}

std::vector<HfPiece> qwen3_moe_block_tensors(const ParamLayout& layout, int layer) {
    const ArchSpec a(layout.config());
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
    const ParamTensor& router = layout.find(p + "router.weight");
    const ParamTensor& w13 = layout.find(p + "experts.gate_up_proj");
    const ParamTensor& w2 = layout.find(p + "experts.down_proj");
    const int64_t C = a.C, F = a.Fe;
    std::vector<HfPiece> out{{p + "gate.weight", {a.E, C}, &router, 0}};
    for (int64_t j = 0; j < a.E; ++j) {
        const std::string x = p + "experts." + std::to_string(j) + ".";
        out.push_back({x + "gate_proj.weight", {F, C}, &w13, j * 2 * F * C});     // the expert's first F rows
        out.push_back({x + "up_proj.weight", {F, C}, &w13, j * 2 * F * C + F * C});  // the next F rows
        out.push_back({x + "down_proj.weight", {C, F}, &w2, j * C * F});
    }
    return out;
}

void check_qwen3_moe_expressible(const GPTConfig& g, const std::string& where) {
    hf_json::refuse_sigmoid_and_shared(g, where, "Qwen3MoeForCausalLM");
}

void set_qwen3_config(json& c, const ArchSpec& a) {
    c["attention_bias"] = false;
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = a.cfg.n_layer;
    if (!a.moe()) return;
    c["num_experts"] = a.E;
    c["num_experts_per_tok"] = a.K;
    c["moe_intermediate_size"] = a.Fe;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
    c["router_aux_loss_coef"] = shortest(a.cfg.moe_aux_loss_coef);
    c["output_router_logits"] = false;
}

void check_qwen3_config(const json& c, const std::string& file, const ArchSpec& a) {
    if (c.contains("use_sliding_window") && c["use_sliding_window"].is_boolean() && c["use_sliding_window"].get<bool>())
        throw InteropError(file + ": use_sliding_window = true: llmtrain's attention is causal over the whole window");
    if (!a.moe()) return;
    auto same = [&](const char* key, int dflt, int want, const char* ours) {
        hf_json::require_same(c, file, key, dflt, want, ours);
    };
    same("num_experts", 128, a.E, "model.moe.n_experts");
    same("num_experts_per_tok", 8, a.K, "model.moe.top_k");
    same("moe_intermediate_size", 768, a.Fe, "the expert width (model.moe.expert_ffn, or model.intermediate_size)");
    same("decoder_sparse_step", 1, 1, "every layer a MoE block (decoder_sparse_step)");
    if (!c.value("norm_topk_prob", false))
        throw InteropError(file + ": norm_topk_prob = " + (c.contains("norm_topk_prob") ? c["norm_topk_prob"].dump()
                                                                                       : std::string("absent (false)")) +
                           ": llmtrain's softmax router renormalizes the top-k weights over the k (expected true)");
    if (c.contains("mlp_only_layers") && !c["mlp_only_layers"].is_null() && !c["mlp_only_layers"].empty())
        throw InteropError(file + ": mlp_only_layers = " + c["mlp_only_layers"].dump() +
                           ": every llmtrain MoE layer has experts (expected [])");
}

void qwen3_config(const json& c, const std::string& file, bool moe, GPTConfig& g) {
    g.qk_norm = true;
    const int hd = positive(c, file, "head_dim", g.n_embd / g.n_head);
    g.head_dim = g.n_embd % g.n_head == 0 && hd == g.n_embd / g.n_head ? 0 : hd;
    if (!moe) return;
    g.moe_experts = positive(c, file, "num_experts", 128);
    g.moe_top_k = positive(c, file, "num_experts_per_tok", 8);
    g.moe_expert_ffn = positive(c, file, "moe_intermediate_size", 768);
    g.moe_shared_experts = 0;
    g.moe_sigmoid = false;
    g.moe_aux_loss_coef = hf_json::aux_loss_coef(c);
}

}  // namespace llmtrain
