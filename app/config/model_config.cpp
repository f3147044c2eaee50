// app/config/model_config.cpp — the model part of the config: cfg.model as the model's GPTConfig,
// and the model config hash that checkpoints record (docs/configuration.md "The model hash").
#include <cstdint>
#include <cstdio>
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

std::string model_config_hash(const Config& cfg) {
    const auto& m = cfg.model;
    // The canonical text is part of the checkpoint format (docs/configuration.md "The model hash"): change it only with a
    // format version bump.
    std::string canon = "gpt2:n_layer=" + std::to_string(m.n_layer) + ",n_head=" + std::to_string(m.n_head) +
                        ",n_embd=" + std::to_string(m.n_embd) + ",seq_len=" + std::to_string(m.seq_len) +
                        ",vocab_size=" + std::to_string(m.vocab_size);
    if (m.arch != "gpt2") {  // GPT-2's text is unchanged; other architectures add their shape keys
        const ArchSpec spec(gpt_config_of(cfg));
        canon = m.arch + canon.substr(4) + ",n_kv_head=" + std::to_string(spec.NKV) + ",intermediate_size=" +
                std::to_string(spec.F) + ",tie_embeddings=" + (spec.tied ? "true" : "false");
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a64(canon)));
    return buf;
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
    return g;
}

}  // namespace llmtrain
