// app/interop/hf_moe.cpp — Mixtral's layout for the mixture-of-experts Llama (see hf_moe.hpp).
#include "app/interop/hf_moe.hpp"

#include "app/interop/hf_json.hpp"

namespace llmtrain {

namespace {
using json = nlohmann::ordered_json;
using hf_json::positive;
using hf_json::shortest;
}  // namespace

std::vector<HfPiece> mixtral_block_tensors(const ParamLayout& layout, int layer) {
    const ArchSpec a(layout.config());
    const std::string ours = "model.layers." + std::to_string(layer) + ".mlp.";
    const std::string hf = "model.layers." + std::to_string(layer) + ".block_sparse_moe.";
    const ParamTensor& router = layout.find(ours + "router.weight");
    const ParamTensor& w13 = layout.find(ours + "experts.gate_up_proj");
    const ParamTensor& w2 = layout.find(ours + "experts.down_proj");
    const int64_t C = a.C, F = a.Fe;
    std::vector<HfPiece> out{{hf + "gate.weight", {a.E, C}, &router, 0}};
    for (int64_t e = 0; e < a.E; ++e) {
        const std::string x = hf + "experts." + std::to_string(e) + ".";
        out.push_back({x + "w1.weight", {F, C}, &w13, e * 2 * F * C});      // gate: the expert's first F rows
        out.push_back({x + "w2.weight", {C, F}, &w2, e * C * F});           // down
        out.push_back({x + "w3.weight", {F, C}, &w13, e * 2 * F * C + F * C});  // up: the next F rows
    }
    return out;
}

void check_mixtral_expressible(const GPTConfig& g, const std::string& where) {
    hf_json::refuse_sigmoid_and_shared(g, where, "MixtralForCausalLM");
}

void set_mixtral_config(json& c, const ArchSpec& a) {
    c["num_local_experts"] = a.E;
    c["num_experts_per_tok"] = a.K;
    c["router_aux_loss_coef"] = shortest(a.cfg.moe_aux_loss_coef);
    c["output_router_logits"] = false;
    c["router_jitter_noise"] = 0.0;
    c["sliding_window"] = nullptr;
}

void check_mixtral_config(const json& c, const std::string& file, const ArchSpec& a) {
    auto same = [&](const char* key, int dflt, int want, const char* ours) {
        hf_json::require_same(c, file, key, dflt, want, ours);
    };
    same("num_local_experts", 8, a.E, "model.moe.n_experts");
    same("num_experts_per_tok", 2, a.K, "model.moe.top_k");
    if (c.contains("sliding_window") && !c["sliding_window"].is_null() &&
        !(c["sliding_window"].is_number_integer() && c["sliding_window"].get<int64_t>() >= a.cfg.seq_len))
        throw InteropError(file + ": sliding_window = " + c["sliding_window"].dump() + ": llmtrain's attention is "
                           "causal over the whole window (expected null or >= model.seq_len = " +
                           std::to_string(a.cfg.seq_len) + ")");
    if (c.contains("router_jitter_noise") && c["router_jitter_noise"].is_number() &&
        c["router_jitter_noise"].get<double>() != 0.0)
        throw InteropError(file + ": router_jitter_noise = " + c["router_jitter_noise"].dump() +
                           ": llmtrain's router has no jitter (expected 0)");
}

void mixtral_moe_config(const json& c, const std::string& file, GPTConfig& g) {
    g.moe_experts = positive(c, file, "num_local_experts", 8);
    g.moe_top_k = positive(c, file, "num_experts_per_tok", 2);
    g.moe_expert_ffn = g.intermediate_size;
    g.moe_shared_experts = 0;
    g.moe_sigmoid = false;
    g.moe_aux_loss_coef = hf_json::aux_loss_coef(c);
}

}  // namespace llmtrain
