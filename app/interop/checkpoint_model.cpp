// app/interop/checkpoint_model.cpp — a checkpoint's model configuration (see checkpoint_model.hpp).
#include "app/interop/checkpoint_model.hpp"

#include <filesystem>

#include "app/config/config.hpp"
#include "app/interop/safetensors.hpp"
#include "app/model_state.hpp"

namespace llmtrain {

GPTConfig checkpoint_model_config(const std::string& ckpt_dir, const TrainState& st) {
    namespace fs = std::filesystem;
    if (st.model.arch != Arch::gpt2) {  // state.toml records the architecture (read_train_state)
        Config c;
        c.model.n_layer = st.model.n_layer;
        c.model.n_head = st.model.n_head;
        c.model.n_embd = st.model.n_embd;
        c.model.seq_len = st.model.seq_len;
        c.model.vocab_size = st.model.vocab_size;
        c.model.arch = arch_name(st.model.arch);
        c.model.n_kv_head = st.model.n_kv_head;
        c.model.intermediate_size = st.model.intermediate_size;
        c.model.tie_embeddings = st.model.tie_embeddings;
        if (model_config_hash(c) != st.model_config_hash)
            throw InteropError("checkpoint '" + ckpt_dir + "': state.toml's model keys hash to " + model_config_hash(c) +
                               ", not its model.config_hash " + st.model_config_hash + " (edited by hand?)");
        return st.model;
    }
    const fs::path cfg_path = fs::path(ckpt_dir).parent_path().parent_path() / "config.toml";
    std::string why = "no " + cfg_path.string();
    if (fs::exists(cfg_path)) {
        try {
            const Config c = load_config(cfg_path.string(), {});
            if (model_config_hash(c) == st.model_config_hash) return gpt_config_of(c);
            why = cfg_path.string() + " describes another model (config hash " + model_config_hash(c) + ")";
        } catch (const std::exception& e) {
            why = cfg_path.string() + ": " + e.what();
        }
    }
    Config gpt2;  // st.model's shape as GPT-2
    gpt2.model.n_layer = st.model.n_layer;
    gpt2.model.n_head = st.model.n_head;
    gpt2.model.n_embd = st.model.n_embd;
    gpt2.model.seq_len = st.model.seq_len;
    gpt2.model.vocab_size = st.model.vocab_size;
    if (st.model_config_hash.empty() || model_config_hash(gpt2) == st.model_config_hash) return st.model;
    throw InteropError("checkpoint '" + ckpt_dir + "': model config hash " + st.model_config_hash +
                       " is not GPT-2's of its shape, and " + why +
                       ": cannot tell its architecture (keep the run's config.toml two levels above step_N)");
}

}  // namespace llmtrain
