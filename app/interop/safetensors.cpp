// app/interop/safetensors.cpp — safetensors reading and writing (see safetensors.hpp).
#include "app/interop/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <bit>
#include <cstring>

#include "model/bf16.hpp"

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian; so is this reader");

namespace llmtrain {

namespace {

using json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit on the JSON header (100 MiB)

/// Bytes per element of a dtype we can read, 0 for any other.
size_t dtype_bytes(const std::string& d) { return d == "F32" ? 4 : d == "BF16" || d == "F16" ? 2 : 0; }

/// IEEE half bits -> fp32 (exact): normals, subnormals, infinities, NaN.
float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (man << 13);  // rebias 15 -> 127
    } else {
        const float f = float(man) * 0x1.0p-24f;  // subnormal: man x 2^-24, exact in fp32
        std::memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

bool is_safetensors(const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    const uint64_t size = f ? uint64_t(f.tellg()) : 0;
    uint64_t n = 0;
    char brace = 0;
    f.seekg(0);
    return f.read(reinterpret_cast<char*>(&n), 8) && n >= 2 && n <= kMaxHeaderBytes && 8 + n <= size &&
           f.read(&brace, 1) && brace == '{';
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path), file_(path, std::ios::binary) {
    if (!file_) throw InteropError(path + ": cannot open");
    file_.seekg(0, std::ios::end);
    const uint64_t size = uint64_t(file_.tellg());
    file_.seekg(0);
    uint64_t n = 0;
    if (size < 8 || !file_.read(reinterpret_cast<char*>(&n), 8))
        throw InteropError(path + ": " + std::to_string(size) + " bytes: too short for a safetensors header length");
    if (n > kMaxHeaderBytes || 8 + n > size)
        throw InteropError(path + ": header length " + std::to_string(n) + " does not fit the file's " +
                           std::to_string(size) + " bytes (not a safetensors file, or truncated)");
    std::string text(n, '\0');
    file_.read(text.data(), std::streamsize(n));
    data_start_ = 8 + n;
    const uint64_t data_size = size - data_start_;
    json h;
    try {
        h = json::parse(text);
    } catch (const json::parse_error& e) {
        throw InteropError(path + ": header is not JSON: " + e.what());
    }
    if (!h.is_object()) throw InteropError(path + ": header: expected a JSON object");
    for (const auto& [name, t] : h.items()) {
        if (name == "__metadata__") continue;
        const std::string where = path + ": tensor " + name + ": ";
        try {
            SafetensorInfo info;
            info.dtype = t.at("dtype").get<std::string>();
            info.shape = t.at("shape").get<std::vector<int64_t>>();
            const auto off = t.at("data_offsets").get<std::vector<uint64_t>>();
            if (off.size() != 2) throw InteropError(where + "data_offsets: expected [begin, end]");
            info.begin = off[0];
            info.end = off[1];
            uint64_t numel = 1;
            for (int64_t d : info.shape) {
                if (d < 0) throw InteropError(where + "shape " + shape_text(info.shape) + " has a negative size");
                numel *= uint64_t(d);
            }
            const size_t es = dtype_bytes(info.dtype);
            if (es != 0 && (info.end < info.begin || info.end - info.begin != numel * es))
                throw InteropError(where + "data_offsets [" + std::to_string(info.begin) + ", " +
                                   std::to_string(info.end) + ") do not hold " + shape_text(info.shape) + " " +
                                   info.dtype + " (" + std::to_string(numel * es) + " bytes)");
            if (info.end > data_size)
                throw InteropError(where + "ends at byte " + std::to_string(info.end) + " of the data, but the file "
                                   "holds only " + std::to_string(data_size) + " data bytes (truncated)");
            tensors_.emplace(name, std::move(info));
        } catch (const json::exception& e) {
            throw InteropError(where + "expected {dtype, shape, data_offsets}: " + e.what());
        }
    }
}

void SafetensorsReader::read_f32(const std::string& name, float* out) {
    const SafetensorInfo& t = tensors_.at(name);
    const size_t es = dtype_bytes(t.dtype);
    if (es == 0) throw InteropError(path_ + ": tensor " + name + ": dtype " + t.dtype + " (expected F32, BF16 or F16)");
    const size_t numel = (t.end - t.begin) / es;
    file_.seekg(std::streamoff(data_start_ + t.begin));
    if (es == 4) {
        file_.read(reinterpret_cast<char*>(out), std::streamsize(numel * 4));
    } else {
        std::vector<uint16_t> half(numel);
        file_.read(reinterpret_cast<char*>(half.data()), std::streamsize(numel * 2));
        for (size_t i = 0; i < numel; ++i) out[i] = t.dtype == "BF16" ? bf16_to_f32(half[i]) : f16_to_f32(half[i]);
    }
    if (!file_) throw InteropError(path_ + ": tensor " + name + ": read failed");
}

void write_safetensors(const std::string& path, const std::vector<SafetensorOut>& tensors, const std::string& dtype,
                       const std::map<std::string, std::string>& metadata) {
    if (dtype != "F32" && dtype != "BF16")
        throw InteropError(path + ": cannot write dtype " + dtype + " (F32 or BF16)");
    const size_t es = dtype == "BF16" ? 2 : 4;
    json h = json::object();
    if (!metadata.empty()) h["__metadata__"] = metadata;
    uint64_t pos = 0;
    for (const auto& t : tensors) {
        uint64_t numel = 1;
        for (int64_t d : t.shape) numel *= uint64_t(d);
        h[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {pos, pos + numel * es}}};
        pos += numel * es;
    }
    std::string text = h.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned (8 + a multiple of 8)
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) throw InteropError(path + ": cannot create");
    const uint64_t n = text.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(text.data(), std::streamsize(n));
    std::vector<float> v;
    std::vector<uint16_t> b;
    for (const auto& t : tensors) {
        size_t numel = 1;
        for (int64_t d : t.shape) numel *= size_t(d);
        v.resize(numel);
        t.values(v.data());
        if (es == 4) {
            f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(numel * 4));
        } else {
            b.resize(numel);
            for (size_t i = 0; i < numel; ++i) b[i] = f32_to_bf16(v[i]);
            f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(numel * 2));
        }
    }
    f.close();
    if (!f) throw InteropError(path + ": write failed");
}

}  // namespace llmtrain
