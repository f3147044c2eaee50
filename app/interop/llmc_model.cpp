// app/interop/llmc_model.cpp — llm.c's model file out and in (see llmc_model.hpp).
#include "app/interop/llmc_model.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>

#include "app/interop/gpt2_names.hpp"
#include "model/bf16.hpp"

namespace llmtrain {

namespace {

/// Header fields [2..6], which must equal the config's model shape.
constexpr const char* kHeaderFields[5] = {"max_seq_len", "vocab_size", "n_layer", "n_head", "channels"};

/// The file's tensors in order as (our tensor name or "h.*.<suffix>" for a stack over the layers).
std::vector<std::string> file_order() {
    std::vector<std::string> v = {"wte", "wpe"};
    for (const char* s : kLayerTensorOrder) v.push_back(std::string("h.*.") + s);
    v.push_back("ln_f.weight");
    v.push_back("ln_f.bias");
    return v;
}

/// Our tensors that make up entry e of file_order(): one, or one per layer.
std::vector<const ParamTensor*> tensors_of(const ParamLayout& layout, const std::string& e) {
    if (!e.starts_with("h.*.")) return {&layout.find(e)};
    std::vector<const ParamTensor*> v;
    for (int l = 0; l < layout.config().n_layer; ++l) v.push_back(&layout.find("h." + std::to_string(l) + e.substr(3)));
    return v;
}

}  // namespace

void write_llmc_model(const std::string& path, const ParamLayout& layout, const float* params, bool bf16) {
    const GPTConfig& g = layout.config();
    std::array<int32_t, 256> h{};
    h[0] = kLlmcMagic;
    h[1] = bf16 ? kLlmcVersionBF16 : kLlmcVersionF32;
    h[2] = g.seq_len;
    h[3] = g.vocab_size;
    h[4] = g.n_layer;
    h[5] = g.n_head;
    h[6] = g.n_embd;
    h[7] = g.padded_vocab_size();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) throw InteropError(path + ": cannot create");
    f.write(reinterpret_cast<const char*>(h.data()), sizeof h);
    std::vector<uint16_t> b;
    auto put = [&](const float* x, size_t n) {
        if (!bf16) {
            f.write(reinterpret_cast<const char*>(x), std::streamsize(n * 4));
            return;
        }
        b.resize(n);
        for (size_t i = 0; i < n; ++i) b[i] = f32_to_bf16(x[i]);
        f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(n * 2));
    };
    for (const std::string& e : file_order())
        for (const ParamTensor* t : tensors_of(layout, e)) {
            if (t->name != "wte") {
                put(params + t->offset, t->numel);
                continue;
            }
            const size_t real = size_t(g.vocab_size) * size_t(g.n_embd);
            put(params + t->offset, real);
            const std::vector<float> zeros(t->numel - real, 0.0f);  // the padded rows, as llm.c pads them
            put(zeros.data(), zeros.size());
        }
    f.close();
    if (!f) throw InteropError(path + ": write failed");
}

bool is_llmc_model(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    int32_t magic = 0;
    return f.read(reinterpret_cast<char*>(&magic), 4) && magic == kLlmcMagic;
}

void read_llmc_model(const std::string& path, const ParamLayout& layout, float* params) {
    const GPTConfig& g = layout.config();
    std::ifstream f(path, std::ios::binary);
    if (!f) throw InteropError(path + ": cannot open");
    f.seekg(0, std::ios::end);
    const uint64_t size = uint64_t(f.tellg());
    f.seekg(0);
    std::array<int32_t, 256> h{};
    if (!f.read(reinterpret_cast<char*>(h.data()), sizeof h))
        throw InteropError(path + ": " + std::to_string(size) + " bytes: shorter than llm.c's 1024-byte header");
    if (h[0] != kLlmcMagic)
        throw InteropError(path + ": magic " + std::to_string(h[0]) + ", expected " + std::to_string(kLlmcMagic) +
                           " (not an llm.c model file)");
    if (h[1] != kLlmcVersionF32 && h[1] != kLlmcVersionBF16)
        throw InteropError(path + ": version " + std::to_string(h[1]) + ", expected 3 (fp32) or 5 (bf16)");
    const int want[5] = {g.seq_len, g.vocab_size, g.n_layer, g.n_head, g.n_embd};
    const char* keys[5] = {"model.seq_len", "model.vocab_size", "model.n_layer", "model.n_head", "model.n_embd"};
    for (int i = 0; i < 5; ++i)
        if (h[size_t(2 + i)] != want[i])
            throw InteropError(path + ": header " + kHeaderFields[i] + " = " + std::to_string(h[size_t(2 + i)]) +
                               ", but the config has " + keys[i] + " = " + std::to_string(want[i]));
    const int64_t Vp = h[7], V = g.vocab_size, C = g.n_embd;
    if (Vp < V)
        throw InteropError(path + ": header padded_vocab_size = " + std::to_string(Vp) + " is below vocab_size = " +
                           std::to_string(V));
    const size_t es = h[1] == kLlmcVersionBF16 ? 2 : 4;
    const uint64_t numel = layout.num_parameters() - uint64_t(g.padded_vocab_size() - V) * uint64_t(C) +
                           uint64_t(Vp - V) * uint64_t(C);  // the file's wte has Vp rows
    if (size != sizeof h + numel * es)
        throw InteropError(path + ": " + std::to_string(size) + " bytes, but a version " + std::to_string(h[1]) +
                           " file of this header holds " + std::to_string(sizeof h + numel * es) + " (1024 + " +
                           std::to_string(numel) + " parameters x " + std::to_string(es) + " bytes)" +
                           (size < sizeof h + numel * es ? ": truncated" : ": trailing bytes"));
    std::fill(params, params + layout.total_numel(), 0.0f);
    std::vector<uint16_t> b;
    auto get = [&](float* x, size_t n) {
        if (es == 4) {
            f.read(reinterpret_cast<char*>(x), std::streamsize(n * 4));
        } else {
            b.resize(n);
            f.read(reinterpret_cast<char*>(b.data()), std::streamsize(n * 2));
            for (size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(b[i]);
        }
        if (!f) throw InteropError(path + ": read failed");
    };
    for (const std::string& e : file_order())
        for (const ParamTensor* t : tensors_of(layout, e)) {
            if (t->name != "wte") {
                get(params + t->offset, t->numel);
                continue;
            }
            get(params + t->offset, size_t(V * C));  // the real rows; the file's padded rows are skipped
            f.seekg(std::streamoff((Vp - V) * C * int64_t(es)), std::ios::cur);
        }
}

}  // namespace llmtrain
