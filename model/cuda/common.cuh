// model/cuda/common.cuh — shared device helpers of the CUDA backend: the two compute
// dtypes (float and __nv_bfloat16) behind one template parameter, and warp/block reductions.
//
// Every kernel of model/cuda is a template over the activation type `T` (float in fp32 mode,
// __nv_bfloat16 in bf16 mode) and accumulates in fp32. The reductions below use xor butterflies,
// which leave the bitwise identical sum in every lane, so results never depend on thread order
// (the property the cuda_emu tests check by running threads forward, reversed and shuffled).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "model/cuda/launch.cuh"

namespace llmtrain::cuda {

/// Before a loop: keep it rolled (nvcc's `#pragma unroll 1`; GCC's spelling in the emulated build).
#ifdef EMU_BUILD
#define NO_UNROLL _Pragma("GCC unroll 1")
#else
#define NO_UNROLL _Pragma("unroll 1")
#endif

/// ceil(a / b) for positive integers.
template <typename I>
__host__ __device__ inline I ceil_div(I a, I b) {
    return (a + b - 1) / b;
}

// ---- the compute dtype: float or __nv_bfloat16, converted through fp32 ----
__device__ __host__ inline float to_float(float x) { return x; }
__device__ __host__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

/// Round-to-nearest-even conversion from fp32 to T.
template <typename T>
__device__ __host__ inline T from_float(float x);
template <>
__device__ __host__ inline float from_float<float>(float x) { return x; }
template <>
__device__ __host__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// 16 bytes of T (8 bf16 or 4 floats), moved with one 128-bit load or store (llm.c's x128): the
/// memory-bound kernels read rows through packs. Pointers must be 16-byte aligned (allocations are
/// 256-byte aligned, parameter tensors start at multiples of 8 elements, rows have C % 8 == 0).
template <typename T>
struct alignas(16) Pack {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
};
template <typename T>
__device__ inline Pack<T> load_pack(const T* p) {
    return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T>
__device__ inline void store_pack(T* p, const Pack<T>& x) {
    *reinterpret_cast<Pack<T>*>(p) = x;
}
/// Elements per pack of the widest case (bf16): row lengths must be multiples of this.
constexpr int kPackElems = 8;

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

/// The row a norm kernel (layernorm.cu, rmsnorm.cu) normalizes, for one lane of its row's warp:
/// with `residual` non-null, residual[off + c] = a + b rounded to T for this lane's packs (c = lane
/// * P, stepping by the warp) and that rounded row, else a's row. Each lane later re-reads only the
/// packs it wrote itself, so no barrier is needed. C % 8 == 0, 16-byte-aligned rows.
template <typename T>
__device__ inline const T* fused_residual_row(T* residual, const T* a, const T* b, size_t off, int C, int lane) {
    constexpr int P = Pack<T>::size;
    if (residual == nullptr) return a + off;
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> pa = load_pack(a + off + c), pb = load_pack(b + off + c);
        Pack<T> sum;
        for (int k = 0; k < P; k++) sum.v[k] = from_float<T>(to_float(pa.v[k]) + to_float(pb.v[k]));
        store_pack(residual + off + c, sum);
    }
    return residual + off;
}

/// Sum of v over the 32 lanes of a full warp; every lane gets the same bits (xor butterfly).
__device__ inline float warp_sum(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}
/// Maximum of v over a full warp; every lane gets it.
__device__ inline float warp_max(float v) {
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
    return v;
}

/// Sum of v over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
/// the same value. `scratch` is __shared__ float[32]. Contains two __syncthreads, so all threads
/// of the block must call it.
__device__ inline float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int n_warps = blockDim.x / kWarpSize;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < n_warps ? scratch[lane] : 0.0f);
}
/// Maximum of v over the whole block; same contract as block_sum.
__device__ inline float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int n_warps = blockDim.x / kWarpSize;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < n_warps ? scratch[lane] : -INFINITY);
}

/// Grid size for an elementwise kernel over n items with `block` threads, capped so that a
/// grid-stride loop covers the rest (the cap does not change results: each item is independent).
inline unsigned elementwise_grid(size_t n, int block) {
    size_t g = (n + block - 1) / block;
    return static_cast<unsigned>(g < 65535 * 8 ? (g == 0 ? 1 : g) : 65535 * 8);
}

}  // namespace llmtrain::cuda
