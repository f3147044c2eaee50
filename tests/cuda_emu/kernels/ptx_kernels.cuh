// tests/cuda_emu/kernels/ptx_kernels.cuh — kernels exercising model/cuda/ptx.cuh with PTX ISA's
// documented fragment layouts: run by the emulator's tests (tests/cuda_emu/test_ptx.cu, bitwise and
// poison checks) and by tests/cuda_emu/ptx_layout_check.cu, which also builds with nvcc and checks
// the same kernels on a real GPU (and ex2.approx against its documented bound). Include from one
// translation unit per program.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/cuda/launch.cuh"
#include "model/cuda/ptx.cuh"

namespace ptx_kernels {
namespace ptx = llmtrain::cuda::ptx;

/// One m16n8k16 per warp w: D_w = A_w * B_w + C_w with A (16x16), B (16x8, [k][n]), C/D (16x8), all
/// row-major; bf16 as raw bits. Fragments per the PTX ISA layout. Warp 1 passes d aliasing c.
__global__ void mma_by_hand(float* D, const uint16_t* A, const uint16_t* B, const float* C) {
    const unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    A += 256 * w, B += 128 * w, C += 128 * w, D += 128 * w;
    auto pa = [&](unsigned r, unsigned c) { return uint32_t{A[r * 16 + c]} | uint32_t{A[r * 16 + c + 1]} << 16; };
    auto pb = [&](unsigned k, unsigned n) { return uint32_t{B[k * 8 + n]} | uint32_t{B[(k + 1) * 8 + n]} << 16; };
    const uint32_t a[4] = {pa(g, 2 * t), pa(g + 8, 2 * t), pa(g, 2 * t + 8), pa(g + 8, 2 * t + 8)};
    const uint32_t b[2] = {pb(2 * t, g), pb(2 * t + 8, g)};
    float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    float d[4];
    if (w == 1) {
        ptx::mma_bf16_16816(c, a, b, c);
        for (int j = 0; j < 4; j++) d[j] = c[j];
    } else {
        ptx::mma_bf16_16816(d, a, b, c);
    }
    D[g * 8 + 2 * t] = d[0], D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2], D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

constexpr int kStride = 24;  // shared row stride in elements (48 bytes: rows are 16-byte aligned, not packed)

/// Four 8x8 b16 matrices in shared memory, matrix j's row r at (perm[j] * 8 + r) * kStride; lane l
/// addresses matrix l/8's row l%8 (lanes beyond 8*num pass a misaligned pointer: ignored). out[lane
/// * 4 + j] = r[j]. op: 1, 2, 4 = x1, x2, x4; 12, 14 = x2.trans, x4.trans.
__global__ void ldmatrix_kernel(uint32_t* out, const uint16_t* src, int op) {
    __shared__ __align__(16) uint16_t s[32 * kStride];
    const int perm[4] = {2, 0, 3, 1};
    const unsigned lane = threadIdx.x;
    for (int i = lane; i < 32 * 8; i += 32) {
        const int j = i / 64, r = (i / 8) % 8, c = i % 8;
        s[(perm[j] * 8 + r) * kStride + c] = src[i];
    }
    __syncwarp();
    const int num = op % 10;
    const void* p = static_cast<int>(lane) < 8 * num ? static_cast<const void*>(&s[(perm[lane / 8] * 8 + lane % 8) * kStride])
                                                     : static_cast<const void*>(reinterpret_cast<const char*>(s) + 2);
    uint32_t r[4] = {0, 0, 0, 0};
    switch (op) {
        case 1: ptx::ldmatrix_x1(r, p); break;
        case 2: ptx::ldmatrix_x2(r, p); break;
        case 4: ptx::ldmatrix_x4(r, p); break;
        case 12: ptx::ldmatrix_x2_trans(r, p); break;
        case 14: ptx::ldmatrix_x4_trans(r, p); break;
    }
    for (int j = 0; j < 4; j++) out[lane * 4 + j] = r[j];
}

/// D (16x16 fp32) = A (16x16) * B (16x16, [k][n]), bf16 row-major in global memory: cp.async into
/// dynamic shared memory (each lane 2 chunks of A, 2 of B), ldmatrix_x4 for A, ldmatrix_x4_trans for
/// both n-halves of B, two mma. D's n-half h is stored at D[r * 16 + 8h + c].
__global__ void composed_kernel(float* D, const uint16_t* A, const uint16_t* B) {
    EXTERN_SHARED(uint16_t, s);  // A at 0, B at 256 (elements)
    const unsigned lane = threadIdx.x, g = lane / 4, t = lane % 4;
    for (unsigned i = lane; i < 64; i += 32) {
        const unsigned off = (i % 32) * 8 + (i / 32) * 256;
        ptx::cp_async_16(s + off, (i < 32 ? A : B - 256) + off, true);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    __syncwarp();
    uint32_t a[4], b[4];
    ptx::ldmatrix_x4(a, s + (lane % 16) * 16 + (lane / 16) * 8);
    ptx::ldmatrix_x4_trans(b, s + 256 + (lane % 16) * 16 + (lane / 16) * 8);
    for (int h = 0; h < 2; h++) {
        const float zero[4] = {0, 0, 0, 0};
        float d[4];
        ptx::mma_bf16_16816(d, a, b + 2 * h, zero);
        D[g * 16 + 8 * h + 2 * t] = d[0], D[g * 16 + 8 * h + 2 * t + 1] = d[1];
        D[(g + 8) * 16 + 8 * h + 2 * t] = d[2], D[(g + 8) * 16 + 8 * h + 2 * t + 1] = d[3];
    }
}

/// Per thread (blockDim.x threads, 16 bytes = 4 floats each) the cp.async scenarios:
///   mode 0: copy, commit, read (out0), wait<0>, read (out1)
///   mode 1: group 1 -> buffer 0, group 2 -> buffer 1, wait<1>: read both (out0 = buf0, out1 = buf1),
///           wait<0>: read buffer 1 again (out2)
///   mode 2: valid = false over nonzero shared bytes, commit, wait<0>: read (out0)
///   mode 3: copy, then wait<0> with the copy uncommitted: read (out0); commit, wait<0>: read (out1)
///   mode 4: thread i copies chunk i, commits; __syncthreads; thread i reads chunk i^1 (out0);
///           __syncthreads; wait<0>; __syncthreads; reads chunk i^1 again (out1)
__global__ void cp_async_kernel(float* out, const float* src, int mode) {
    __shared__ __align__(16) float s[2][64 * 4];
    const unsigned i = threadIdx.x, n = blockDim.x;
    float* o0 = out + i * 4;
    float* o1 = out + (n + i) * 4;
    float* o2 = out + (2 * n + i) * 4;
    auto read = [](float* dst, const float* from) { memcpy(dst, from, 16); };
    if (mode == 0 || mode == 3) {
        ptx::cp_async_16(&s[0][i * 4], src + i * 4, true);
        if (mode == 0) ptx::cp_async_commit();
        if (mode == 0) read(o0, &s[0][i * 4]);
        ptx::cp_async_wait<0>();
        if (mode == 3) read(o0, &s[0][i * 4]), ptx::cp_async_commit(), ptx::cp_async_wait<0>();
        read(o1, &s[0][i * 4]);
    } else if (mode == 1) {
        ptx::cp_async_16(&s[0][i * 4], src + i * 4, true);
        ptx::cp_async_commit();
        ptx::cp_async_16(&s[1][i * 4], src + (n + i) * 4, true);
        ptx::cp_async_commit();
        ptx::cp_async_wait<1>();
        read(o0, &s[0][i * 4]);
        read(o1, &s[1][i * 4]);
        ptx::cp_async_wait<0>();
        read(o2, &s[1][i * 4]);
    } else if (mode == 2) {
        for (int e = 0; e < 4; e++) s[0][i * 4 + e] = 7.0f;
        ptx::cp_async_16(&s[0][i * 4], src + i * 4, false);
        ptx::cp_async_commit();
        ptx::cp_async_wait<0>();
        read(o0, &s[0][i * 4]);
    } else if (mode == 4) {
        ptx::cp_async_16(&s[0][i * 4], src + i * 4, true);
        ptx::cp_async_commit();
        __syncthreads();
        read(o0, &s[0][(i ^ 1) * 4]);
        __syncthreads();  // every thread has read before any waits
        ptx::cp_async_wait<0>();
        __syncthreads();
        read(o1, &s[0][(i ^ 1) * 4]);
    }
}

/// out[i] = ex2_approx(in[i]), one thread per element (n of them).
__global__ void ex2_kernel(float* out, const float* in, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = ptx::ex2_approx(in[i]);
}

/// The inputs ex2_mismatches checks: -inf, a subnormal, 0, -126 (the smallest normal result),
/// -126.5 and -140 (subnormal results), 1, 127 and 129 (+inf), then [-125, 20] in steps of 1/64.
inline std::vector<float> ex2_inputs() {
    std::vector<float> x = {-INFINITY, 0x1p-140f, 0.0f, -126.0f, -126.5f, -140.0f, 1.0f, 127.0f, 129.0f};
    for (int k = -125 * 64; k <= 20 * 64; k++) x.push_back(k / 64.0f);
    return x;
}

/// How many of ex2_approx's results y (of ex2_inputs() x) break ex2.approx.ftz.f32's contract
/// (PTX ISA "ex2"): -inf, subnormal results -> +0 exactly, a subnormal input -> 1, 2^129 -> +inf,
/// else within 2^-22 relative of the double 2^x (the ISA's bound, "2 ulp" in the table).
inline int ex2_mismatches(const std::vector<float>& x, const std::vector<float>& y) {
    int bad = 0;
    for (size_t i = 0; i < x.size(); i++) {
        const double want = std::exp2(static_cast<double>(x[i]));
        if (std::isinf(x[i]) || x[i] < -126.0f) bad += !(y[i] == 0.0f && !std::signbit(y[i]));
        else if (want > 0x1.fffffep127) bad += !std::isinf(y[i]);
        else bad += !(std::fabs(y[i] - want) <= 0x1p-22 * want);
    }
    return bad;
}

}  // namespace ptx_kernels
