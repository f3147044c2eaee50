// tests/cuda_emu/cublas_test_util.hpp — helpers shared by the cuBLAS and cuBLASLt tests:
// host matrices whose values are exact in the element type, emulated device buffers, and the
// naive double-precision reference GEMM the emulation is compared against.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace emu_test {

/// Bytes per element of the tested types (fp32, bf16).
inline size_t elem_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

/// Rounds v to the precision of `t` (round to nearest even for bf16, via cuda_bf16.h).
inline float round_to(cudaDataType t, float v) {
    return t == CUDA_R_32F ? v : __bfloat162float(__float2bfloat16_rn(v));
}

/// Host values -> the bytes of `t`; values must already be exact in `t` (round_to).
inline std::vector<uint8_t> encode(const std::vector<float>& v, cudaDataType t) {
    std::vector<uint8_t> out(v.size() * elem_bytes(t));
    for (size_t i = 0; i < v.size(); ++i) {
        if (t == CUDA_R_32F) {
            std::memcpy(out.data() + 4 * i, &v[i], 4);
        } else {
            __nv_bfloat16 b = __float2bfloat16_rn(v[i]);
            std::memcpy(out.data() + 2 * i, &b, 2);
        }
    }
    return out;
}

inline std::vector<float> decode(const std::vector<uint8_t>& bytes, cudaDataType t) {
    std::vector<float> out(bytes.size() / elem_bytes(t));
    for (size_t i = 0; i < out.size(); ++i) {
        if (t == CUDA_R_32F) {
            std::memcpy(&out[i], bytes.data() + 4 * i, 4);
        } else {
            __nv_bfloat16 b;
            std::memcpy(&b, bytes.data() + 2 * i, 2);
            out[i] = __bfloat162float(b);
        }
    }
    return out;
}

/// `count` uniform values in [-1, 1), exact in `t`, reproducible from `seed`.
inline std::vector<float> random_values(size_t count, cudaDataType t, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(count);
    for (float& x : v) x = round_to(t, u(rng));
    return v;
}

/// An emulated device buffer holding host values as type `t` (cudaMalloc / cudaMemcpy).
class DeviceMatrix {
public:
    DeviceMatrix(const std::vector<float>& values, cudaDataType t) : type_(t), count_(values.size()) {
        EXPECT_EQ(cudaMalloc(&ptr_, bytes()), cudaSuccess);
        upload(values);
    }
    ~DeviceMatrix() { cudaFree(ptr_); }
    DeviceMatrix(const DeviceMatrix&) = delete;
    DeviceMatrix& operator=(const DeviceMatrix&) = delete;

    void upload(const std::vector<float>& values) {
        std::vector<uint8_t> b = encode(values, type_);
        EXPECT_EQ(cudaMemcpy(ptr_, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    /// Blocking copy back; call after synchronizing the stream that wrote it.
    std::vector<float> download() const {
        std::vector<uint8_t> b(bytes());
        EXPECT_EQ(cudaMemcpy(b.data(), ptr_, b.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        return decode(b, type_);
    }
    void* get() const { return ptr_; }
    size_t bytes() const { return count_ * elem_bytes(type_); }

private:
    cudaDataType type_;
    size_t count_;
    void* ptr_ = nullptr;
};

/// op(X)[r, c] of a column-major matrix with leading dimension ld.
inline double op_at(const std::vector<float>& x, cublasOperation_t op, int64_t ld, int64_t r, int64_t c,
                    int64_t offset = 0) {
    return op == CUBLAS_OP_N ? x[offset + r + c * ld] : x[offset + c + r * ld];
}

/// Reference product in double: dot[i + j*m] = sum_p op(A)[i,p] op(B)[p,j], and the magnitude
/// sum_p |op(A)[i,p] op(B)[p,j]| that bounds its rounding error.
struct Product {
    std::vector<double> dot, magnitude;
};
inline Product reference_product(const std::vector<float>& a, cublasOperation_t ta, int64_t lda, int64_t off_a,
                                 const std::vector<float>& b, cublasOperation_t tb, int64_t ldb, int64_t off_b,
                                 int64_t m, int64_t n, int64_t k) {
    Product p{std::vector<double>(m * n, 0.0), std::vector<double>(m * n, 0.0)};
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i)
            for (int64_t q = 0; q < k; ++q) {
                double t = op_at(a, ta, lda, i, q, off_a) * op_at(b, tb, ldb, q, j, off_b);
                p.dot[i + j * m] += t;
                p.magnitude[i + j * m] += std::fabs(t);
            }
    return p;
}

/// Relative tolerance of a result stored as `t` and accumulated in fp32: fp32 1e-5, bf16 2^-8
/// (one rounding of the output to 8 significant bits, plus fp32 accumulation).
inline double rel_tol(cudaDataType t) { return t == CUDA_R_32F ? 1e-5 : std::ldexp(1.0, -8); }

}  // namespace emu_test
