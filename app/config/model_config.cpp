// app/config/model_config.cpp — the model part of the config: cfg.model as the model's GPTConfig,
// the model's identity (every key that changes its function), the model config hash that
// checkpoints record over it, and the one check a resume makes of it (docs/configuration.md
// "The model hash").
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "app/config/config.hpp"
#include "model/arch.hpp"

namespace llmtrain {

namespace {

/// FNV-1a, 64 bits (Fowler, Noll, Vo): the model hash's function, part of the checkpoint format.
uint64_t fnv1a64(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 0x100000001b3ull;  // FNV 64-bit prime
    }
    return h;
}

}  // namespace

ModelIdentity model_identity(const GPTConfig& g) {
    const ArchSpec spec(g);
    auto num = [](float x) {  // the shortest fixed-point text that reads back as the same float
        char buf[64];       // enough for any float in fixed notation
        const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
        return std::string(buf, r.ptr);
    };
    ModelIdentity id{{"arch", arch_name(g.arch)},
                     {"n_layer", std::to_string(g.n_layer)},
                     {"n_head", std::to_string(g.n_head)},
                     {"n_embd", std::to_string(g.n_embd)},
                     {"seq_len", std::to_string(g.seq_len)},
                     {"vocab_size", std::to_string(g.vocab_size)}};
    if (g.arch == Arch::gpt2) return id;  // every other key is fixed by the architecture
    id.insert(id.end(), {{"n_kv_head", std::to_string(spec.NKV)},
                         {"intermediate_size", std::to_string(spec.F)},
                         {"tie_embeddings", spec.tied ? "true" : "false"},
                         {"rope_theta", num(spec.rope_theta)},
                         {"norm_eps", num(spec.norm_eps)}});
    if (g.head_dim > 0 && !(g.n_embd % g.n_head == 0 && g.head_dim == g.n_embd / g.n_head))
        id.emplace_back("head_dim", std::to_string(spec.HS));  // Qwen3's free head size
    if (g.qk_norm) id.emplace_back("qk_norm", "true");         // Qwen3's QK-norm
    if (g.moe_experts > 0)  // a dense model's identity (and hash) stays what it was
        id.insert(id.end(), {{"moe.n_experts", std::to_string(spec.E)},
                             {"moe.top_k", std::to_string(spec.K)},
                             {"moe.n_shared_experts", std::to_string(g.moe_shared_experts)},
                             {"moe.expert_ffn", std::to_string(spec.Fe)},
                             {"moe.router", g.moe_sigmoid ? "sigmoid" : "softmax"}});
    return id;
}

namespace {

/// The keys model_identity gained with state.toml format 4 (not in the hash written before).
bool added_in_format4(const std::string& key) { return key == "rope_theta" || key == "norm_eps"; }

/// 16 hex digits of FNV-1a 64 over "<arch>:k=v,k=v,..." (the pairs after arch; `legacy`: only those
/// hashed before format 4). The text is part of the checkpoint format: change it only with a
/// format version bump.
std::string identity_hash(const ModelIdentity& id, bool legacy) {
    std::string canon = id.at(0).second + ":";
    for (size_t i = 1; i < id.size(); ++i) {
        if (legacy && added_in_format4(id[i].first)) continue;
        canon += (i > 1 ? "," : "") + id[i].first + "=" + id[i].second;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a64(canon)));
    return buf;
}

}  // namespace

std::string model_config_hash(const Config& cfg) { return identity_hash(model_identity(gpt_config_of(cfg)), false); }

std::string legacy_model_config_hash(const GPTConfig& g) { return identity_hash(model_identity(g), true); }

std::string model_identity_mismatch(const ModelIdentity& recorded, const GPTConfig& recorded_model,
                                    const std::string& recorded_hash, const Config& cfg) {
    const ModelIdentity mine = model_identity(gpt_config_of(cfg));
    ModelIdentity theirs = recorded;
    if (theirs.empty()) {  // no [model_identity]: [model]'s keys, when they are the ones that were hashed
        try {
            const ModelIdentity id = model_identity(recorded_model);
            if (identity_hash(id, true) == recorded_hash || identity_hash(id, false) == recorded_hash) theirs = id;
        } catch (const std::invalid_argument&) {
            // an invalid recorded shape: only the hash can be compared
        }
        if (theirs.empty())
            return identity_hash(mine, true) == recorded_hash || identity_hash(mine, false) == recorded_hash
                       ? ""
                       : "its model config hash " + recorded_hash + " differs from the config's " +
                             identity_hash(mine, false) + " (state.toml has no [model_identity] to name the key)";
    }
    auto find = [](const ModelIdentity& id, const std::string& key) -> const std::string* {
        for (const auto& [k, v] : id)
            if (k == key) return &v;
        return nullptr;
    };
    for (const auto& [key, value] : mine) {
        const std::string* had = find(theirs, key);
        if (!had || *had != value)
            return "model." + key + ": the checkpoint has " + (had ? *had : std::string("no such key")) +
                   ", the config " + value;
    }
    for (const auto& [key, value] : theirs)
        if (!find(mine, key)) return "model." + key + ": the checkpoint has " + value + ", the config no such key";
    if (!recorded.empty() && recorded_hash != identity_hash(mine, false))
        return "its model.config_hash " + recorded_hash + " does not match its [model_identity] (" +
               identity_hash(mine, false) + "; state.toml edited by hand?)";
    return "";
}

GPTConfig gpt_config_of(const Config& c) {
    GPTConfig g;
    g.n_layer = c.model.n_layer;
    g.n_head = c.model.n_head;
    g.n_embd = c.model.n_embd;
    g.seq_len = c.model.seq_len;
    g.vocab_size = c.model.vocab_size;
    g.arch = c.model.arch == "llama" ? Arch::llama : Arch::gpt2;  // validated: "gpt2" or "llama"
    g.n_kv_head = c.model.n_kv_head;
    g.intermediate_size = c.model.intermediate_size;
    g.multiple_of = c.model.multiple_of;
    g.norm_eps = c.model.norm_eps;
    g.rope_theta = c.model.rope_theta;
    g.tie_embeddings = c.model.tie_embeddings;
    g.head_dim = c.model.head_dim;
    g.qk_norm = c.model.qk_norm;
    g.moe_experts = c.moe.n_experts;
    g.moe_top_k = c.moe.top_k;
    g.moe_shared_experts = c.moe.n_shared_experts;
    g.moe_expert_ffn = c.moe.expert_ffn;
    g.moe_sigmoid = c.moe.router == "sigmoid";
    g.moe_aux_loss_coef = c.moe.aux_loss_coef;
    g.moe_capacity_factor = c.moe.capacity_factor;
    return g;
}

}  // namespace llmtrain
