// model/cuda/ptx.cuh — PTX warp-level primitives for the CUDA backend's tensor-core kernels:
// mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix, cp.async, a bf16x2 pack, ex2.approx and
// %laneid.
//
// Under nvcc each function is one inline-PTX instruction (asm volatile; sm_80 or later). In the
// emulated build (EMU_BUILD, emu/) the same names are the emulator's C++ model
// (emu/device_ptx.hpp, ptx.cpp; docs/cuda_emu.md, "PTX primitives"), with PTX's
// documented fragment layouts, so a kernel written against this header runs unchanged in both.
// There every function takes a trailing defaulted std::source_location (the call site, used to
// check that the 32 lanes of a warp collective meet at the same call); never pass it.
//
// Sources: PTX ISA, "Warp Level Matrix Multiply-Accumulate Instructions" (mma, "Matrix Fragments
// for mma.m16n8k16 with floating point type"; "Warp-level matrix load instruction: ldmatrix"),
// "Data Movement and Conversion Instructions" (cp.async, cp.async.commit_group,
// cp.async.wait_group; cvt with .rn.bf16x2.f32), "Floating Point Instructions: ex2".
//
// Fragment notation used below: lane = thread index in the warp, g = lane / 4 (the "groupID"),
// t = lane % 4 (the "threadID_in_group"). A uint32_t register holding bf16 elements holds the
// lower-indexed element in its low 16 bits.
#pragma once
#include <cstdint>

// In the emulated build the emulator's prelude (force-included there, never by product code)
// declares llmtrain::cuda::ptx; only nvcc sees the inline PTX below.
#ifndef EMU_BUILD

namespace llmtrain::cuda::ptx {

/// D = A * B + C on one warp (a warp collective: all 32 lanes, converged), PTX
/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` (sm_80+). A is 16x16 bf16 (row), B is
/// 16x8 bf16 (col), C and D are 16x8 fp32; d may alias c. Fragments (PTX ISA "Matrix Fragments
/// for mma.m16n8k16 with floating point type"), each uint32_t two bf16 (low half first):
///   a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
///   b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
///   c/d[0], [1] = C[g][2t], C[g][2t+1]                   c/d[2], [3] = C[g+8][2t], C[g+8][2t+1]
/// The GPU's summation order inside the 16-term dot product is unspecified.
__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}

namespace detail {
/// The 32-bit shared-window address of a generic pointer into shared memory (cvta.to.shared).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
}  // namespace detail

/// Loads one 8x8 b16 matrix from shared memory (warp collective), PTX
/// `ldmatrix.sync.aligned.m8n8.x1.shared.b16` (sm_75+). Lanes 0-7 pass the addresses of rows 0-7
/// (each 16 bytes, 16-byte aligned; the other lanes' addresses are ignored). Lane i receives
/// r[0] = row i/4, elements 2(i%4) (low half) and 2(i%4)+1 (high half) — the layout of an mma
/// A/B fragment register.
__device__ __forceinline__ void ldmatrix_x1(uint32_t r[1], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(detail::smem_u32(smem)));
}

/// Two 8x8 b16 matrices (`.x2`): lanes 0-7 address matrix 0's rows, lanes 8-15 matrix 1's (lanes
/// 16-31 ignored); r[j] is matrix j in the x1 layout (row i/4, elements 2(i%4), 2(i%4)+1).
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(detail::smem_u32(smem)));
}

/// Four 8x8 b16 matrices (`.x4`): lanes 8j..8j+7 address matrix j's rows; r[j] is matrix j in the
/// x1 layout. With rows 0-15 x cols 0-7 as matrices 0,1 and cols 8-15 as 2,3 (lane l addresses
/// row l%16, column 8*(l/16)) this is exactly an mma m16n8k16 A fragment of a row-major tile.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(detail::smem_u32(smem)));
}

/// `.x2.trans`: as ldmatrix_x2, but each matrix is delivered transposed: lane i receives
/// M[2(i%4)][i/4] (low half) and M[2(i%4)+1][i/4] (high half), M the matrix as addressed (row
/// addresses from lanes 8j..8j+7). Loads an mma B fragment from a row-major [k][n] tile.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t r[2], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(detail::smem_u32(smem)));
}

/// `.x4.trans`: four matrices, each transposed as in ldmatrix_x2_trans.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(detail::smem_u32(smem)));
}

/// Starts an asynchronous 16-byte copy global -> shared by this thread, PTX
/// `cp.async.cg.shared.global [smem], [gmem], 16, src_size` (sm_80+); both addresses 16-byte
/// aligned. valid = false: src_size 0, gmem is not read and 16 zero bytes are written. The
/// destination must not be read (or written) before a cp_async_wait retires the copy's group.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(detail::smem_u32(smem)), "l"(gmem),
                 "r"(valid ? 16 : 0)
                 : "memory");
}

/// Closes this thread's pending cp.async copies into one group, PTX `cp.async.commit_group`.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/// Waits until at most N of this thread's committed groups are pending (the older ones complete;
/// N = 0: all), PTX `cp.async.wait_group N`. Per thread: other threads see the data after a
/// barrier (__syncthreads) that follows their writers' waits.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// Two floats rounded to bf16 (round to nearest even) in one register, lo in bits 0-15 and hi in
/// bits 16-31 (an mma A/B fragment register), PTX `cvt.rn.bf16x2.f32 d, hi, lo` (sm_80+).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/// 2^x, PTX `ex2.approx.ftz.f32` (maximum relative error 2^-22 over the full range; subnormal
/// inputs and results flushed to 0; -inf gives +0). exp2f without --use_fast_math adds a range
/// check and two multiplies around the same instruction to keep subnormal results: the softmax of
/// FlashAttention-2 (whose probabilities below 2^-126 are 0 either way in bf16) does without.
__device__ __forceinline__ float ex2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

/// This thread's lane in its warp (0-31), PTX `mov.u32 %laneid` as asm volatile: read where it is
/// written and never hoisted, so addresses derived from it are computed there instead of being
/// kept in registers across a loop (the fused backward's dQ staging addresses, hoisted out of its
/// step loop, made ptxas spill 4-60 bytes beside the GEMMs' accumulators).
__device__ __forceinline__ int lane_id() {
    int l;
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(l));
    return l;
}

}  // namespace llmtrain::cuda::ptx
#endif
