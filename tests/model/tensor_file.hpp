// tests/model/tensor_file.hpp — a minimal named-tensor file shared with tests/model/torch_ref.py.
//
// Records, little-endian, until end of file: u32 name length, name bytes, u32 dtype (0 = fp32,
// 1 = int32, 2 = fp64), u32 ndim, i64 dims[ndim], then the elements row-major.
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace llmtrain::test {

struct NamedTensor {
    std::vector<int64_t> shape;
    std::vector<double> data;  // every dtype widened to double on read
};

class TensorWriter {
public:
    explicit TensorWriter(const std::string& path) : f_(path, std::ios::binary) {
        if (!f_) throw std::runtime_error("cannot write " + path);
    }
    template <class T>
    void put(const std::string& name, const std::vector<int64_t>& shape, const T* data) {
        static_assert(sizeof(T) == 4, "fp32 or int32");
        const uint32_t len = static_cast<uint32_t>(name.size()), dtype = std::is_same_v<T, float> ? 0 : 1,
                       ndim = static_cast<uint32_t>(shape.size());
        f_.write(reinterpret_cast<const char*>(&len), 4);
        f_.write(name.data(), len);
        f_.write(reinterpret_cast<const char*>(&dtype), 4);
        f_.write(reinterpret_cast<const char*>(&ndim), 4);
        int64_t n = 1;
        for (int64_t d : shape) {
            f_.write(reinterpret_cast<const char*>(&d), 8);
            n *= d;
        }
        f_.write(reinterpret_cast<const char*>(data), n * 4);
    }

private:
    std::ofstream f_;
};

/// Reads every record of `path`. Errors: std::runtime_error naming the file.
inline std::map<std::string, NamedTensor> read_tensors(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    std::map<std::string, NamedTensor> out;
    uint32_t len;
    while (f.read(reinterpret_cast<char*>(&len), 4)) {
        std::string name(len, '\0');
        uint32_t dtype, ndim;
        f.read(name.data(), len);
        f.read(reinterpret_cast<char*>(&dtype), 4);
        f.read(reinterpret_cast<char*>(&ndim), 4);
        NamedTensor t;
        t.shape.resize(ndim);
        int64_t n = 1;
        for (auto& d : t.shape) {
            f.read(reinterpret_cast<char*>(&d), 8);
            n *= d;
        }
        t.data.resize(n);
        for (int64_t i = 0; i < n; ++i) {
            if (dtype == 2) {
                f.read(reinterpret_cast<char*>(&t.data[i]), 8);
            } else if (dtype == 0) {
                float v;
                f.read(reinterpret_cast<char*>(&v), 4);
                t.data[i] = v;
            } else {
                int32_t v;
                f.read(reinterpret_cast<char*>(&v), 4);
                t.data[i] = v;
            }
        }
        if (!f) throw std::runtime_error(path + ": truncated record '" + name + "'");
        out[name] = std::move(t);
    }
    return out;
}

}  // namespace llmtrain::test
