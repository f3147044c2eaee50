// app/interop/hf_llama.cpp — HuggingFace Llama weights out and in (see hf_llama.hpp).
#include "app/interop/hf_llama.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <climits>
#include <optional>
#include <set>

#include "app/interop/hf_moe.hpp"
#include "app/interop/hf_qwen3.hpp"
#include "app/interop/hf_shards.hpp"
#include "model/arch.hpp"

namespace llmtrain {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

/// Every parameter as HF stores it, in HF's state-dict order (embed_tokens, the layers in module
/// order, norm, lm_head): our tensors one to one (the vocabulary rows unpadded), a MoE block's as
/// Mixtral's (hf_moe.hpp: the router, then w1, w2, w3 per expert) or with QK-norm as Qwen3-MoE's
/// (hf_qwen3.hpp: the router, then gate_proj, up_proj, down_proj per expert).
std::vector<HfPiece> hf_tensors(const ParamLayout& layout) {
    const ArchSpec a(layout.config());
    std::vector<HfPiece> out, last;
    for (int u = 0; u < a.num_units(); ++u)
        for (const TensorSpec& s : a.unit_tensors(u)) {
            if (s.role == TensorRole::moe_router) {
                const std::vector<HfPiece> m =
                    a.qk_norm ? qwen3_moe_block_tensors(layout, u - 1) : mixtral_block_tensors(layout, u - 1);
                out.insert(out.end(), m.begin(), m.end());
            }
            if (s.role == TensorRole::moe_router || s.role == TensorRole::moe_w13 || s.role == TensorRole::moe_w2)
                continue;
            HfPiece t{s.name, s.shape, &layout.find(s.name), 0};
            const bool vocab_rows = s.role == TensorRole::tok_emb || s.role == TensorRole::lm_head;
            if (vocab_rows) t.shape[0] = layout.config().vocab_size;
            (s.role == TensorRole::lm_head ? last : out).push_back(std::move(t));
        }
    out.insert(out.end(), last.begin(), last.end());
    return out;
}

/// A float as the shortest decimal that reads back to it (1e-5f -> 1e-05), so config.json holds 1e-05,
/// not 9.99999974737875e-06.
double clean(float v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::stod(std::string(buf, r.ptr));
}

json hf_config(const ArchSpec& a, const HfLlamaOut& o) {
    const GPTConfig& g = a.cfg;
    json c;
    const auto [type, arch] = hf_family(a);  // llama, mixtral, qwen3 or qwen3_moe
    c["architectures"] = {arch};
    c["model_type"] = type;
    c["vocab_size"] = g.vocab_size;
    c["hidden_size"] = a.C;
    c["intermediate_size"] = a.moe() ? a.Fe : a.F;  // Mixtral's is the expert width
    c["num_hidden_layers"] = g.n_layer;
    c["num_attention_heads"] = a.NH;
    c["num_key_value_heads"] = a.NKV;
    c["head_dim"] = a.HS;
    c["hidden_act"] = "silu";
    c["max_position_embeddings"] = g.seq_len;  // the trained context (RoPE itself has no table)
    c["rms_norm_eps"] = clean(a.norm_eps);
    c["rope_theta"] = clean(a.rope_theta);
    if (a.qk_norm) {
        c["rope_scaling"] = nullptr;
        c["attention_dropout"] = 0.0;
        set_qwen3_config(c, a);
    } else if (a.moe()) {
        c["attention_dropout"] = 0.0;
        set_mixtral_config(c, a);
    } else {
        c["rope_scaling"] = nullptr;
        c["attention_bias"] = false;
        c["attention_dropout"] = 0.0;
        c["mlp_bias"] = false;
        c["pretraining_tp"] = 1;
    }
    c["initializer_range"] = 0.02;
    c["tie_word_embeddings"] = a.tied;
    c["bos_token_id"] = o.bos_id >= 0 ? json(o.bos_id) : json(nullptr);
    c["eos_token_id"] = o.eos_id >= 0 ? json(o.eos_id) : json(nullptr);
    c["use_cache"] = true;
    c["torch_dtype"] = o.dtype == "BF16" ? "bfloat16" : "float32";
    return c;
}

json read_json(const std::string& file) {
    std::ifstream f(file);
    if (!f) throw InteropError(file + ": cannot open (a HuggingFace model needs config.json beside its weights)");
    try {
        json c = json::parse(f);
        if (!c.is_object()) throw InteropError(file + ": expected a JSON object");
        return c;
    } catch (const json::parse_error& e) {
        throw InteropError(file + ": not JSON: " + e.what());
    }
}

/// config.json must describe the layout's Llama (absent keys take LlamaConfig's defaults).
void check_config(const std::string& file, const ArchSpec& a) {
    const json c = read_json(file);
    const std::string type = c.value("model_type", std::string());
    const std::string want = hf_family(a).first;
    const bool qwen3 = type == "qwen3" || type == "qwen3_moe";
    if ((type == "mixtral" || type == "qwen3_moe") && !a.moe())
        throw InteropError(file + ": model_type = \"" + type + "\": a mixture of experts, but the config has none "
                           "(set [model.moe] n_experts, top_k and expert_ffn to the file's)");
    if (qwen3 && !a.qk_norm)
        throw InteropError(file + ": model_type = \"" + type + "\": its attention normalizes each q and k head "
                           "(self_attn.q_norm, k_norm), but the config has model.qk_norm = false (set it to true, and "
                           "model.head_dim to the file's head_dim)");
    if (type != want)
        throw InteropError(file + ": model_type = \"" + type + "\": expected \"" + want + "\" (" +
                           (a.moe() ? "model.moe.n_experts > 0" : "model.arch = \"llama\"") +
                           (a.qk_norm ? ", model.qk_norm = true)" : ", model.qk_norm = false)"));
    auto need = [&](const char* key, int want, const std::string& ours, std::optional<int> dflt = std::nullopt) {
        if ((!c.contains(key) || c[key].is_null()) && dflt) {
            if (*dflt == want) return;
            throw InteropError(file + ": " + key + " absent (HF's default " + std::to_string(*dflt) +
                               "), but the config has " + ours + " = " + std::to_string(want));
        }
        if (!c.contains(key) || !c[key].is_number_integer())
            throw InteropError(file + ": " + key + ": missing or not an integer");
        if (c[key].get<int64_t>() != want)
            throw InteropError(file + ": " + key + " = " + std::to_string(c[key].get<int64_t>()) +
                               ", but the config has " + ours + " = " + std::to_string(want));
    };
    need("num_hidden_layers", a.cfg.n_layer, "model.n_layer");
    need("num_attention_heads", a.NH, "model.n_head");
    need("hidden_size", a.C, "model.n_embd");
    if (a.moe() && !qwen3)  // Qwen3-MoE's expert width is moe_intermediate_size (check_qwen3_config)
        need("intermediate_size", a.Fe, "the expert width (model.moe.expert_ffn, or model.intermediate_size)");
    else if (!a.moe())
        need("intermediate_size", a.F, "intermediate_size (model.intermediate_size or its default)");
    need("vocab_size", a.cfg.vocab_size, "model.vocab_size");
    const int nh = c.contains("num_attention_heads") ? c["num_attention_heads"].get<int>() : a.NH;
    need("num_key_value_heads", a.NKV, "n_kv_head (model.n_kv_head, 0 = n_head)", nh);
    need("head_dim", a.HS, "the head size (model.head_dim, 0 = n_embd / n_head)", a.cfg.n_embd / a.NH);
    const std::string act = c.value("hidden_act", std::string("silu"));
    if (act != "silu")
        throw InteropError(file + ": hidden_act = \"" + act + "\": llmtrain's Llama MLP is SwiGLU (\"silu\")");
    auto same_float = [&](const char* key, double dflt, float ours, const char* name) {
        const double v = c.contains(key) && c[key].is_number() ? c[key].get<double>() : dflt;
        if (float(v) != ours)
            throw InteropError(file + ": " + key + " = " + json(v).dump() + ", but the config has " + name + " = " +
                               json(clean(ours)).dump());
    };
    same_float("rms_norm_eps", 1e-6, a.norm_eps, "model.norm_eps");
    same_float("rope_theta", 10000.0, a.rope_theta, "model.rope_theta");
    const bool tied = c.value("tie_word_embeddings", false);
    if (tied != a.tied)
        throw InteropError(file + ": tie_word_embeddings = " + (tied ? "true" : "false") +
                           ", but the config has model.tie_embeddings = " + (a.tied ? "true" : "false"));
    for (const char* key : {"attention_bias", "mlp_bias"})
        if (c.value(key, false))
            throw InteropError(file + ": " + key + " = true: llmtrain's Llama has no biases");
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
        throw InteropError(file + ": rope_scaling = " + c["rope_scaling"].dump() +
                           ": llmtrain's RoPE is unscaled (expected null)");
    if (qwen3) check_qwen3_config(c, file, a);
    else if (a.moe()) check_mixtral_config(c, file, a);
}

}  // namespace

void write_hf_llama(const std::string& dir, const ParamLayout& layout, const float* params, const HfLlamaOut& o) {
    if (layout.config().arch != Arch::llama)
        throw InteropError(dir + ": write_hf_llama: the checkpoint is model.arch = \"" +
                           arch_name(layout.config().arch) + "\", not \"llama\"");
    const ArchSpec a(layout.config());
    if (a.moe() && a.qk_norm) check_qwen3_moe_expressible(layout.config(), dir);
    else if (a.moe()) check_mixtral_expressible(layout.config(), dir);
    std::vector<SafetensorOut> out;
    for (const HfPiece& t : hf_tensors(layout)) {
        const float* src = params + t.ours->offset + t.offset;
        size_t n = 1;
        for (int64_t d : t.shape) n *= size_t(d);
        out.push_back({t.name, t.shape, [=](float* dst) { std::copy(src, src + n, dst); }});
    }
    write_hf_weights(dir, out, o.dtype, {{"format", "pt"}}, o.max_shard_bytes);
    const std::string cfg = (fs::path(dir) / "config.json").string();
    std::ofstream f(cfg, std::ios::trunc);
    f << hf_config(a, o).dump(2) << "\n";
    f.close();
    if (!f) throw InteropError(cfg + ": write failed");
}

void read_hf_llama(const std::string& path, const ParamLayout& layout, float* params) {
    HfWeights w(path);
    const ArchSpec a(layout.config());
    check_config((fs::path(w.dir()) / "config.json").string(), a);
    std::fill(params, params + layout.total_numel(), 0.0f);
    const std::vector<HfPiece> all = hf_tensors(layout);
    std::map<std::string, const HfPiece*> expected;
    for (const HfPiece& t : all) expected[t.name] = &t;
    std::set<std::string> found;
    for (const auto& [name, info] : w.tensors()) {
        if (name.ends_with("rotary_emb.inv_freq")) continue;      // a buffer older files keep
        if (name == "lm_head.weight" && a.tied) continue;        // checked against embed_tokens below
        const auto it = expected.find(name);
        if (it == expected.end())
            throw InteropError(w.file_of(name) + ": tensor " + name + ": not a parameter of this " +
                               hf_family(a).second + " (" + (a.moe() ? "n_experts = " + std::to_string(a.E) + ", " : "") +
                               "n_layer = " + std::to_string(a.cfg.n_layer) + (a.tied ? ", tied embeddings" : "") + ")");
        const HfPiece& t = *it->second;
        if (info.shape != t.shape)
            throw InteropError(w.file_of(name) + ": tensor " + name + ": shape " + shape_text(info.shape) +
                               ", expected " + shape_text(t.shape) + " for the config's model");
        found.insert(name);
        w.read_f32(name, params + t.ours->offset + t.offset);  // names the file and tensor on another dtype
    }
    for (const HfPiece& t : all)
        if (!found.count(t.name))
            throw InteropError(w.source() + ": tensor " + t.name + " (shape " + shape_text(t.shape) +
                               ") is missing");
    if (a.tied && w.tensors().count("lm_head.weight")) {
        const std::string head = "lm_head.weight";
        const HfPiece& emb = all[0];
        bool same = w.tensors().at(head).shape == emb.shape;
        if (same) {
            std::vector<float> buf(size_t(emb.shape[0] * emb.shape[1]));
            w.read_f32(head, buf.data());
            same = std::equal(buf.begin(), buf.end(), params + emb.ours->offset);
        }
        if (!same)
            throw InteropError(w.file_of(head) + ": tensor lm_head.weight differs from model.embed_tokens.weight, "
                               "but the config ties them (model.tie_embeddings = true)");
    }
}

GPTConfig hf_llama_config(const std::string& path) {
    const std::string file = (fs::path(HfWeights(path).dir()) / "config.json").string();
    const json c = read_json(file);
    auto get = [&](const char* key, std::optional<int> dflt = std::nullopt) -> int {
        if ((!c.contains(key) || c[key].is_null()) && dflt) return *dflt;
        if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() <= 0 ||
            c[key].get<int64_t>() > INT32_MAX)
            throw InteropError(file + ": " + key + ": missing or not a positive integer");
        return c[key].get<int>();
    };
    const std::string type = c.value("model_type", std::string());
    GPTConfig g;
    g.arch = Arch::llama;
    g.n_layer = get("num_hidden_layers");
    g.n_head = get("num_attention_heads");
    g.n_embd = get("hidden_size");
    g.vocab_size = get("vocab_size");
    g.intermediate_size = get("intermediate_size");
    g.n_kv_head = get("num_key_value_heads", g.n_head);
    g.seq_len = get("max_position_embeddings", 2048);  // LlamaConfig's defaults where a key is absent
    g.norm_eps = float(c.value("rms_norm_eps", 1e-6));
    g.rope_theta = float(c.value("rope_theta", 10000.0));
    g.tie_embeddings = c.value("tie_word_embeddings", false);
    if (type == "mixtral") mixtral_moe_config(c, file, g);  // the experts' keys
    if (type == "qwen3" || type == "qwen3_moe") qwen3_config(c, file, type == "qwen3_moe", g);  // QK-norm, head_dim, experts
    else {  // LlamaConfig and MixtralConfig have head_dim too (default hidden_size / num_attention_heads)
        const int hd = get("head_dim", g.n_embd / g.n_head);
        g.head_dim = g.n_embd % g.n_head == 0 && hd == g.n_embd / g.n_head ? 0 : hd;
    }
    try {
        check_config(file, ArchSpec(g));  // head_dim, hidden_act, biases, rope_scaling: what we cannot run
    } catch (const std::invalid_argument& e) {
        throw InteropError(file + ": " + e.what());
    }
    return g;
}

std::string hf_model_type(const std::string& dir) {
    const std::string file = (fs::path(dir) / "config.json").string();
    if (!fs::exists(file)) return "";
    const json c = read_json(file);
    if (c.contains("model_type") && c["model_type"].is_string()) return c["model_type"].get<std::string>();
    if (c.contains("architectures") && c["architectures"].is_array())
        for (const auto& x : c["architectures"]) {
            if (x == "GPT2LMHeadModel") return "gpt2";
            if (x == "LlamaForCausalLM") return "llama";
            if (x == "MixtralForCausalLM") return "mixtral";
            if (x == "Qwen3MoeForCausalLM") return "qwen3_moe";
            if (x == "Qwen3ForCausalLM") return "qwen3";
        }
    return "";
}

}  // namespace llmtrain
