// app/interop/hf_json.hpp — config.json reading and writing helpers the HuggingFace MoE layouts share
// (Mixtral's, app/interop/hf_moe.cpp, and Qwen3-MoE's, app/interop/hf_qwen3.cpp): a positive integer
// key with its default, a key that must equal the config's value, a float written as its shortest
// decimal, and the refusal of what neither MoE class can hold.
#pragma once
#include <nlohmann/json.hpp>

#include <charconv>
#include <climits>
#include <cstdint>
#include <string>

#include "app/interop/safetensors.hpp"  // InteropError
#include "model/param_layout.hpp"  // GPTConfig

namespace llmtrain::hf_json {

/// config.json's integer `key`, or dflt when absent or null. Errors: InteropError naming the file
/// and key when present and not a positive integer.
inline int positive(const nlohmann::ordered_json& c, const std::string& file, const char* key, int dflt) {
    if (!c.contains(key) || c[key].is_null()) return dflt;
    if (!c[key].is_number_integer() || c[key].get<int64_t>() <= 0 || c[key].get<int64_t>() > INT32_MAX)
        throw InteropError(file + ": " + key + " = " + c[key].dump() + ": expected a positive integer");
    return c[key].get<int>();
}

/// Checks that config.json's `key` (dflt when absent) equals `want`, the value of our `ours`.
/// Errors: InteropError naming the file, the key, both values and our key.
inline void require_same(const nlohmann::ordered_json& c, const std::string& file, const char* key, int dflt,
                         int want, const char* ours) {
    const int v = positive(c, file, key, dflt);
    if (v != want)
        throw InteropError(file + ": " + key + " = " + std::to_string(v) + ", but the config has " + ours + " = " +
                           std::to_string(want));
}

/// A float as the shortest decimal that reads back to it (0.01f -> 0.01, not 0.009999999776).
inline double shortest(float v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::stod(std::string(buf, r.ptr));
}

/// config.json's router_aux_loss_coef, or 0.001 (both classes' default) when absent or not a number.
inline float aux_loss_coef(const nlohmann::ordered_json& c) {
    return float(c.contains("router_aux_loss_coef") && c["router_aux_loss_coef"].is_number()
                     ? c["router_aux_loss_coef"].get<double>()
                     : 0.001);
}

/// Refuses what HF class `cls` (a softmax-routed MoE without shared experts) cannot hold: a sigmoid
/// router (DeepSeek-V3's) and shared experts. Errors: InteropError naming `where` and the key.
inline void refuse_sigmoid_and_shared(const GPTConfig& g, const std::string& where, const std::string& cls) {
    if (g.moe_sigmoid)
        throw InteropError(where + ": model.moe.router = \"sigmoid\": " + cls + "'s router is a softmax over "
                           "the experts (HuggingFace's layout cannot hold DeepSeek-V3's sigmoid router)");
    if (g.moe_shared_experts > 0)
        throw InteropError(where + ": model.moe.n_shared_experts = " + std::to_string(g.moe_shared_experts) + ": " +
                           cls + " has no shared experts (HuggingFace's layout cannot hold them)");
}

}  // namespace llmtrain::hf_json
