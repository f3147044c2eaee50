// model/cuda/flash_tiles.cuh — what the FlashAttention-2 forward (flash_forward.cu) and backward
// (flash_backward.cu) kernels share: the bf16 tiles in shared memory (their padded row length, the
// aligned base, the cp.async copy of a block of rows, zero-filled past T), the log2-domain
// constants, and on the host the shape/pointer check and the launch with opted-in shared memory.
//
// Layout as attention.cu: qkv (B,T,(NH + 2 NKV)*HS) holds q | k | v per position (NKV = NH: (B,T,3C));
// out (B,T,C), C = NH*HS; lse (B,NH,T) the log-sum-exp of each row of scaled scores
// s_ij = q_i.k_j / sqrt(HS), j <= i. Query head h reads key/value head h / (NH/NKV) straight from
// qkv (Ainslie et al. 2023); NKV = NH is multi-head attention.
//
// Fragments (PTX ISA "Matrix Fragments for mma.m16n8k16"; g = lane / 4, t = lane % 4): an fp32
// accumulator tile 16x8 holds rows g and g + 8, columns 2t and 2t + 1 in each lane; so do the
// bf16 A fragments of a 16x16 tile (columns 2t, 2t + 1 and 2t + 8, 2t + 9). Two neighbouring
// accumulator tiles of S (16 x 16 keys) are therefore, rounded to bf16 and packed in pairs, the
// A fragment of P for P V: S, P and O never leave registers (the FA2 register trick; acc_to_a in
// mma_fragments.cuh). Row statistics are per lane (two rows) and reduced over the four lanes of a
// quad by shuffles.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "model/cuda/kernels.cuh"
#include "model/cuda/mma_fragments.cuh"
#include "model/cuda/ptx.cuh"

namespace llmtrain::cuda {

using bf16 = __nv_bfloat16;
template <int HS>
constexpr int kTileLd = flash_tile_ld(HS);  ///< namespace-scope constants: usable in device code
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// Starts the copy of rows [r0, r0 + kRows) of src (row r at src + r * stride, HS bf16 each) into
/// tile (kRows x flash_tile_ld(HS)), rows >= T as zeros, by kThreads threads; the caller commits and
/// waits. A thread copies the same 16-byte column of every kThreads / (HS / 8)-th row, so a pass
/// is one compare and two adds (per-chunk division and 64-bit address arithmetic made the loop
/// ~20 instructions a copy in SASS). Offsets in 32 bits (check_flash: T x stride < 2^31) and the
/// loop kept rolled: the copies run inside the kernels' loops beside 200 accumulator registers,
/// and 64-bit row offsets hoisted per unrolled row spilled at head size 128 (ptxas -v).
template <int HS, int kRows, int kThreads>
__device__ inline void copy_rows(bf16* tile, const bf16* src, size_t stride, int r0, int T_) {
    constexpr int kChunks = HS / 8, kLd = kTileLd<HS>, kPass = kThreads / kChunks;  // rows per pass
    static_assert(kThreads % kChunks == 0);
    const int st = static_cast<int>(stride), c = static_cast<int>(threadIdx.x % kChunks) * 8;
    int r = static_cast<int>(threadIdx.x / kChunks);
    bf16* dst = tile + r * kLd + c;
    NO_UNROLL
    for (; r < kRows; r += kPass, dst += kPass * kLd) {
        const bool valid = r0 + r < T_;
        ptx::cp_async_16(dst, src + (valid ? (r0 + r) * st + c : 0), valid);
    }
}

/// Throws std::invalid_argument for a shape or pointer the kernels do not take: a head size other
/// than 64 or 128, NKV not dividing NH, a batch row of qkv of 2^31 elements or more (T x (C + 2 NKV
/// HS): copy_rows' 32-bit offsets), a pointer not 16-byte aligned.
inline void check_flash(int T_, int C, int NH, int NKV, std::initializer_list<const void*> ptrs) {
    if (!flash_attention_supported(C, NH))
        throw std::invalid_argument("cuda flash attention: n_embd " + std::to_string(C) + " / n_head " +
                                    std::to_string(NH) + " must be a head size of 64 or 128");
    if (NKV < 1 || NH % NKV != 0)
        throw std::invalid_argument("cuda flash attention: n_kv_head " + std::to_string(NKV) +
                                    " must divide n_head " + std::to_string(NH));
    const long long width = C + 2LL * NKV * (C / NH);  // qkv's elements per position
    if (T_ * width >= (1LL << 31))
        throw std::invalid_argument("cuda flash attention: seq_len " + std::to_string(T_) + " x " +
                                    std::to_string(width) + " qkv columns must stay below 2^31 elements per batch row");
    for (const void* p : ptrs)
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
            throw std::invalid_argument("cuda flash attention: tensor pointers must be 16-byte aligned");
}

/// Launches kernel (kThreads threads a block) with smem bytes of dynamic shared memory (above the
/// default 48 KiB: opted in).
template <int kThreads, typename... P, typename... A>
void launch_flash(void (*kernel)(P...), dim3 grid, size_t smem, cudaStream_t stream, A... args) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch(kernel, grid, dim3(kThreads), smem, stream, args...);
}

}  // namespace llmtrain::cuda
