// app/interop/checkpoint_model.cpp — a checkpoint's model configuration (see checkpoint_model.hpp).
#include "app/interop/checkpoint_model.hpp"

#include <filesystem>

#include "app/config/config.hpp"
#include "app/interop/safetensors.hpp"
#include "app/model_state.hpp"

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
    return c;
}

}  // namespace

GPTConfig checkpoint_model_config(const std::string& ckpt_dir, const TrainState& st) {
    namespace fs = std::filesystem;
    for (const auto& [key, value] : st.model_identity)  // [model.moe] (docs/model.md "Mixture of experts")
        if (key == "moe.n_experts")
            throw InteropError("checkpoint '" + ckpt_dir + "': a mixture-of-experts model (model." + key + " = " + value +
                               "): reading its weights outside a training run (export, eval) is not supported yet");
    if (st.model.arch != Arch::gpt2) {  // state.toml records the architecture (read_train_state)
        const Config c = hash_config_of(st.model);
        const std::string why = model_identity_mismatch(st.model_identity, st.model, st.model_config_hash, c);
        if (!why.empty())
            throw InteropError("checkpoint '" + ckpt_dir + "': state.toml's [model] keys are not the model it records (" +
                               why + "; edited by hand?)");
        return st.model;
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
