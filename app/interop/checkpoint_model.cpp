// app/interop/checkpoint_model.cpp — a checkpoint's model configuration (see checkpoint_model.hpp).
#include "app/interop/checkpoint_model.hpp"

#include <filesystem>

#include "app/config/config.hpp"
#include "app/interop/safetensors.hpp"

namespace llmtrain {

namespace {

/// A Config whose model keys are g's, as far as model_identity reads them (the shape, and for
/// another architecture arch, n_kv_head, intermediate_size, tie_embeddings, rope_theta, norm_eps).
Config hash_config_of(const GPTConfig& g) {
    Config c;
    c.model.n_layer = g.n_layer;
    c.model.n_head = g.n_head;
    c.model.n_embd = g.n_embd;
    c.model.seq_len = g.seq_len;
    c.model.vocab_size = g.vocab_size;
    c.model.arch = arch_name(g.arch);
    c.model.n_kv_head = g.n_kv_head;
    c.model.intermediate_size = g.intermediate_size;
    c.model.tie_embeddings = g.tie_embeddings;
    c.model.multiple_of = g.multiple_of;
    c.model.rope_theta = g.rope_theta;
    c.model.norm_eps = g.norm_eps;
    c.model.head_dim = g.head_dim;
    c.model.qk_norm = g.qk_norm;
    c.moe.n_experts = g.moe_experts;
    c.moe.top_k = g.moe_top_k;
    c.moe.n_shared_experts = g.moe_shared_experts;
    c.moe.expert_ffn = g.moe_expert_ffn;
    c.moe.router = g.moe_sigmoid ? "sigmoid" : "softmax";
    return c;
}

/// g with the model.moe keys of a [model_identity] (moe.n_experts, moe.top_k, moe.n_shared_experts,
/// moe.expert_ffn, moe.router) and Qwen3's head_dim and qk_norm (state.toml's [model] does not record
/// them): g unchanged for a dense model without them. Errors: InteropError naming the checkpoint and key on a value that is not a number.
GPTConfig with_moe_identity(GPTConfig g, const std::vector<std::pair<std::string, std::string>>& id,
                            const std::string& ckpt_dir) {
    for (const auto& [key, value] : id) {
        if (key == "qk_norm") g.qk_norm = value == "true";
        if (key != "head_dim" && !key.starts_with("moe.")) continue;
        if (key == "moe.router") {
            g.moe_sigmoid = value == "sigmoid";
            continue;
        }
        int v = 0;
        try {
            v = std::stoi(value);
        } catch (const std::exception&) {
            throw InteropError("checkpoint '" + ckpt_dir + "': [model_identity] model." + key + " = " + value +
                               ": not an integer");
        }
        if (key == "moe.n_experts") g.moe_experts = v;
        else if (key == "moe.top_k") g.moe_top_k = v;
        else if (key == "moe.n_shared_experts") g.moe_shared_experts = v;
        else if (key == "moe.expert_ffn") g.moe_expert_ffn = v;
        else if (key == "head_dim") g.head_dim = v;
    }
    return g;
}

/// The load-balancing coefficient of the run's config.toml (two levels above step_N) when it
/// describes this model (its hash is the checkpoint's), else g's default: alpha changes the
/// objective, not the function, so it is not in the identity (llmtrain-export writes it as
/// Mixtral's router_aux_loss_coef). Best effort, never an error.
float run_aux_loss_coef(const std::string& ckpt_dir, const TrainState& st, float dflt) {
    namespace fs = std::filesystem;
    try {
        const fs::path cfg = fs::path(ckpt_dir).parent_path().parent_path() / "config.toml";
        if (!fs::exists(cfg)) return dflt;
        const Config c = load_config(cfg.string(), {});
        return model_config_hash(c) == st.model_config_hash ? c.moe.aux_loss_coef : dflt;
    } catch (const std::exception&) {
        return dflt;
    }
}

}  // namespace

GPTConfig checkpoint_model_config(const std::string& ckpt_dir, const TrainState& st) {
    namespace fs = std::filesystem;
    if (st.model.arch != Arch::gpt2) {  // state.toml records the architecture (read_train_state)
        GPTConfig g = with_moe_identity(st.model, st.model_identity, ckpt_dir);  // [model.moe] from the identity
        const Config c = hash_config_of(g);
        const std::string why = model_identity_mismatch(st.model_identity, g, st.model_config_hash, c);
        if (!why.empty())
            throw InteropError("checkpoint '" + ckpt_dir + "': state.toml's [model] keys are not the model it records (" +
                               why + "; edited by hand?)");
        if (g.moe_experts > 0) g.moe_aux_loss_coef = run_aux_loss_coef(ckpt_dir, st, g.moe_aux_loss_coef);
        return g;
    }
    const fs::path cfg_path = fs::path(ckpt_dir).parent_path().parent_path() / "config.toml";
    std::string why = "no " + cfg_path.string();
    if (fs::exists(cfg_path)) {
        try {
            const Config c = load_config(cfg_path.string(), {});
            if (model_config_hash(c) == st.model_config_hash ||
                legacy_model_config_hash(gpt_config_of(c)) == st.model_config_hash)  // written before format 4
                return gpt_config_of(c);
            why = cfg_path.string() + " describes another model (config hash " + model_config_hash(c) + ")";
        } catch (const std::exception& e) {
            why = cfg_path.string() + ": " + e.what();
        }
    }
    const Config gpt2 = hash_config_of(st.model);  // st.model's shape as GPT-2 (its arch keys are GPT-2's)
    if (st.model_config_hash.empty() || model_config_hash(gpt2) == st.model_config_hash) return st.model;
    throw InteropError("checkpoint '" + ckpt_dir + "': model config hash " + st.model_config_hash +
                       " is not GPT-2's of its shape, and " + why +
                       ": cannot tell its architecture (keep the run's config.toml two levels above step_N)");
}

}  // namespace llmtrain
