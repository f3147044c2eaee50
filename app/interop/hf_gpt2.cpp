// app/interop/hf_gpt2.cpp — HuggingFace GPT-2 weights out and in (see hf_gpt2.hpp).
#include "app/interop/hf_gpt2.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "app/interop/gpt2_names.hpp"

namespace llmtrain {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

/// One tensor as HuggingFace stores it.
struct HfTensor {
    std::string name;            ///< HF name, "transformer." prefix included
    const ParamTensor* ours;     ///< our tensor
    std::vector<int64_t> shape;  ///< HF's shape
    bool conv1d = false;         ///< stored transposed: (in, out) = ours (out, in) transposed
};

/// Every parameter in HF's state-dict order (wte, wpe, the layers in module order, ln_f).
std::vector<HfTensor> hf_tensors(const ParamLayout& layout) {
    const GPTConfig& g = layout.config();
    std::vector<HfTensor> out;
    auto add = [&](const std::string& ours, const std::string& hf) {
        HfTensor t{"transformer." + hf, &layout.find(ours), layout.find(ours).shape, false};
        if (ours == "wte") t.shape[0] = g.vocab_size;  // our padded rows are not HF's
        t.conv1d = ours.starts_with("h.") && t.shape.size() == 2;
        if (t.conv1d) std::swap(t.shape[0], t.shape[1]);
        out.push_back(std::move(t));
    };
    add("wte", "wte.weight");
    add("wpe", "wpe.weight");
    for (int l = 0; l < g.n_layer; ++l)
        for (const char* s : kLayerTensorOrder) {
            const std::string name = "h." + std::to_string(l) + "." + s;
            add(name, name);
        }
    add("ln_f.weight", "ln_f.weight");
    add("ln_f.bias", "ln_f.bias");
    return out;
}

/// config.json for layout's model (GPT2Config's keys).
json hf_config(const GPTConfig& g, const std::string& dtype) {
    json c;
    c["architectures"] = {"GPT2LMHeadModel"};
    c["model_type"] = "gpt2";
    c["vocab_size"] = g.vocab_size;
    c["n_positions"] = g.seq_len;
    c["n_ctx"] = g.seq_len;
    c["n_embd"] = g.n_embd;
    c["n_layer"] = g.n_layer;
    c["n_head"] = g.n_head;
    c["n_inner"] = nullptr;                      // 4 x n_embd
    c["activation_function"] = "gelu_new";       // GELU, tanh approximation (ours: model/cpu/gelu.cpp)
    c["layer_norm_epsilon"] = 1e-5;
    c["resid_pdrop"] = 0.0;                      // llmtrain trains without dropout
    c["embd_pdrop"] = 0.0;
    c["attn_pdrop"] = 0.0;
    c["initializer_range"] = 0.02;
    c["scale_attn_weights"] = true;              // scores / sqrt(head size)
    c["tie_word_embeddings"] = true;
    c["use_cache"] = true;
    c["torch_dtype"] = dtype == "BF16" ? "bfloat16" : "float32";
    return c;
}

/// config.json beside the weights must describe the layout's model.
void check_config(const std::string& file, const GPTConfig& g) {
    std::ifstream f(file);
    if (!f) throw InteropError(file + ": cannot open (a HuggingFace model needs config.json beside model.safetensors)");
    json c;
    try {
        c = json::parse(f);
    } catch (const json::parse_error& e) {
        throw InteropError(file + ": not JSON: " + e.what());
    }
    auto need = [&](const char* key, int want, const char* ours) {
        if (!c.contains(key) || !c[key].is_number_integer())
            throw InteropError(file + ": " + key + ": missing or not an integer");
        if (c[key].get<int64_t>() != want)
            throw InteropError(file + ": " + key + " = " + std::to_string(c[key].get<int64_t>()) +
                               ", but the config has " + ours + " = " + std::to_string(want));
    };
    need("n_layer", g.n_layer, "model.n_layer");
    need("n_head", g.n_head, "model.n_head");
    need("n_embd", g.n_embd, "model.n_embd");
    need("n_positions", g.seq_len, "model.seq_len");
    need("vocab_size", g.vocab_size, "model.vocab_size");
    // Keys that would make it another network than ours; absent means HF's default, which is ours.
    const std::string act = c.value("activation_function", std::string("gelu_new"));
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
        throw InteropError(file + ": activation_function = \"" + act + "\": llmtrain's GPT-2 uses GELU's tanh "
                           "approximation (\"gelu_new\")");
    if (c.contains("layer_norm_epsilon") && std::fabs(c["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12)
        throw InteropError(file + ": layer_norm_epsilon = " + c["layer_norm_epsilon"].dump() + ": llmtrain's is 1e-5");
    if (c.contains("n_inner") && !c["n_inner"].is_null() && c["n_inner"] != 4 * g.n_embd)
        throw InteropError(file + ": n_inner = " + c["n_inner"].dump() + ": llmtrain's MLP is 4 x n_embd = " +
                           std::to_string(4 * g.n_embd));
}

}  // namespace

void write_hf_gpt2(const std::string& dir, const ParamLayout& layout, const float* params, const std::string& dtype) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw InteropError(dir + ": cannot create the directory: " + ec.message());
    std::vector<SafetensorOut> out;
    for (const HfTensor& t : hf_tensors(layout)) {
        const float* src = params + t.ours->offset;
        SafetensorOut o{t.name, t.shape, nullptr};
        if (t.conv1d) {
            const int64_t rows = t.ours->shape[0], cols = t.ours->shape[1];  // ours (out, in)
            o.values = [=](float* dst) {
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
            };
        } else {
            const size_t n = size_t(t.shape[0]) * (t.shape.size() > 1 ? size_t(t.shape[1]) : 1);
            o.values = [=](float* dst) { std::copy(src, src + n, dst); };
        }
        out.push_back(std::move(o));
    }
    write_safetensors((fs::path(dir) / "model.safetensors").string(), out, dtype, {{"format", "pt"}});
    const std::string cfg = (fs::path(dir) / "config.json").string();
    std::ofstream f(cfg, std::ios::trunc);
    f << hf_config(layout.config(), dtype).dump(2) << "\n";
    f.close();
    if (!f) throw InteropError(cfg + ": write failed");
}

void read_hf_gpt2(const std::string& path, const ParamLayout& layout, float* params) {
    const fs::path weights = fs::is_directory(path) ? fs::path(path) / "model.safetensors" : fs::path(path);
    check_config((weights.parent_path() / "config.json").string(), layout.config());
    SafetensorsReader r(weights.string());
    std::fill(params, params + layout.total_numel(), 0.0f);
    std::map<std::string, const HfTensor*> expected;  // by name without the "transformer." prefix
    const std::vector<HfTensor> all = hf_tensors(layout);
    for (const HfTensor& t : all) expected[t.name.substr(12)] = &t;
    std::set<std::string> found;
    std::vector<float> buf;
    for (const auto& [name, info] : r.tensors()) {
        const std::string key = name.starts_with("transformer.") ? name.substr(12) : name;
        if (key == "lm_head.weight") continue;  // checked against wte below
        const auto it = expected.find(key);
        if (it == expected.end()) {
            if (key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias")) continue;  // causal-mask buffers
            throw InteropError(r.path() + ": tensor " + name + ": not a GPT-2 parameter of this model (n_layer = " +
                               std::to_string(layout.config().n_layer) + ")");
        }
        const HfTensor& t = *it->second;
        if (info.shape != t.shape)
            throw InteropError(r.path() + ": tensor " + name + ": shape " + shape_text(info.shape) + ", expected " +
                               shape_text(t.shape) + " for the config's model");
        if (!found.insert(key).second) throw InteropError(r.path() + ": tensor " + key + " is stored twice");
        float* dst = params + t.ours->offset;
        if (!t.conv1d) {
            r.read_f32(name, dst);
            continue;
        }
        const int64_t in = t.shape[0], out = t.shape[1];
        buf.resize(size_t(in * out));
        r.read_f32(name, buf.data());
        for (int64_t i = 0; i < in; ++i)
            for (int64_t o = 0; o < out; ++o) dst[o * in + i] = buf[size_t(i * out + o)];
    }
    for (const HfTensor& t : all)
        if (!found.count(t.name.substr(12)))
            throw InteropError(r.path() + ": tensor " + t.name + " (shape " + shape_text(t.shape) + ") is missing");
    for (const char* head : {"lm_head.weight", "transformer.lm_head.weight"}) {
        if (!r.tensors().count(head)) continue;
        const SafetensorInfo& info = r.tensors().at(head);
        const HfTensor& wte = all[0];
        bool same = info.shape == wte.shape;
        if (same) {
            buf.resize(size_t(wte.shape[0] * wte.shape[1]));
            r.read_f32(head, buf.data());
            same = std::equal(buf.begin(), buf.end(), params + wte.ours->offset);
        }
        if (!same)
            throw InteropError(r.path() + ": tensor " + head + " differs from transformer.wte.weight: llmtrain's "
                               "GPT-2 ties the LM head to the token embedding");
    }
}

}  // namespace llmtrain
