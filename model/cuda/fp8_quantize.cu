// model/cuda/fp8_quantize.cu — current scaling for the FP8 linear layers (training.fp8; docs/fp8.md):
// an operand's amax (over the whole tensor, per row or per column), the scales made from it, and
// its FP8 copy, straight or transposed (cuBLASLt's FP8 GEMMs take only the "TN" layout, so the
// backward reads transposed copies; fp8_linear.hpp).
//
// amax is a max, which does not depend on the order it is taken in: the per-tensor and per-column
// kernels combine their partial maxima with atomicMax on the fp32 bit patterns of |x| (for
// non-negative floats the unsigned order of the bits is the numeric order; a NaN's bits exceed
// every finite value's, so a NaN wins, and its scale is then 1: model/fp8.hpp), and the results are
// bitwise the same in every run. The conversions are model/fp8.hpp's (exact OFP8 rounding,
// saturating), through fp8.cuh. The kernels are simple element-per-thread loops: they move
// 3 bytes per element (read T, write 1 byte), unmeasured against the GEMMs they feed.
#include <algorithm>

#include "model/cuda/fp8.cuh"
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {
namespace {

constexpr int kTile = 32;      ///< the transposing copy's square tile
constexpr int kTileRows = 8;   ///< its block is kTile x kTileRows threads
constexpr int kColRows = 256;  ///< rows one block of the per-column amax covers

/// |x| as fp32 bits (ordered like the values; NaN above every number).
template <typename T>
__device__ inline unsigned abs_bits(T x) {
    return fp8_detail::float_bits(fabsf(to_float(x)));
}

/// Warp-wide max of unsigned values (xor butterfly: every lane ends with the max).
__device__ inline unsigned warp_max_u(unsigned v) {
    for (int off = 16; off > 0; off /= 2) {
        const unsigned o = __shfl_xor_sync(kFullMask, v, off);
        v = o > v ? o : v;
    }
    return v;
}

/// amax[0] = max |x| over x[0, n) (bits, atomicMax: amax zeroed before). Grid-stride.
template <typename T>
__global__ void amax_tensor_kernel(unsigned* amax, const T* x, size_t n) {
    unsigned m = 0;
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
        const unsigned a = abs_bits(x[i]);
        m = a > m ? a : m;
    }
    m = warp_max_u(m);
    if (threadIdx.x % kWarpSize == 0) atomicMax(amax, m);
}

/// amax[r] = max |x[r, :]| for x (R, Cc): one warp per row, lanes along the row; a plain store.
template <typename T>
__global__ void amax_rows_kernel(unsigned* amax, const T* x, int R, int Cc) {
    const int r = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (r >= R) return;  // a whole warp leaves together
    unsigned m = 0;
    for (int c = lane; c < Cc; c += kWarpSize) {
        const unsigned a = abs_bits(x[size_t(r) * Cc + c]);
        m = a > m ? a : m;
    }
    m = warp_max_u(m);
    if (lane == 0) amax[r] = m;
}

/// amax[c] = max |x[:, c]| for x (R, Cc): block (kTile, kTileRows) covers kTile columns (reads
/// along a row are coalesced) and kColRows rows; atomicMax per column and block (amax zeroed before).
template <typename T>
__global__ void amax_cols_kernel(unsigned* amax, const T* x, int R, int Cc) {
    const int c = blockIdx.x * kTile + threadIdx.x;
    if (c >= Cc) return;
    const int r0 = blockIdx.y * kColRows, r1 = min(R, r0 + kColRows);
    unsigned m = 0;
    for (int r = r0 + threadIdx.y; r < r1; r += kTileRows) {
        const unsigned a = abs_bits(x[size_t(r) * Cc + c]);
        m = a > m ? a : m;
    }
    atomicMax(amax + c, m);
}

/// s[0, n) holds amaxes (fp32 bits) on entry; on exit s[i] = fp8_scale_from_amax(amax_i, f) and
/// s[n + i] = 1 / s[i] (the inverse: cuBLASLt's A/B scale, model/fp8.hpp).
__global__ void scales_kernel(float* s, int n, Fp8Format f) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float scale = fp8_scale_from_amax(s[i], f);
        s[i] = scale;
        s[n + i] = 1.0f / scale;
    }
}

/// The scale of element (r, c) under `axis`.
__device__ inline float scale_at(const float* scale, Fp8Axis axis, int r, int c) {
    return scale[axis == Fp8Axis::tensor ? 0 : axis == Fp8Axis::rows ? r : c];
}

/// q (R, Cc) = fp8(x * scale) elementwise, grid-stride.
template <typename T>
__global__ void quantize_kernel(uint8_t* q, const T* x, const float* scale, Fp8Axis axis, int R, int Cc,
                                Fp8Format f) {
    const size_t n = size_t(R) * Cc, stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
        const int r = int(i / size_t(Cc)), c = int(i % size_t(Cc));
        q[i] = to_fp8_scaled(x[i], scale_at(scale, axis, r, c), f);
    }
}

/// q (Cc, R) = fp8(x * scale)^T for x (R, Cc): a kTile x kTile tile read along x's rows, turned in
/// shared memory, written along q's rows (both sides coalesced). Block (kTile, kTileRows).
template <typename T>
__global__ void quantize_transpose_kernel(uint8_t* q, const T* x, const float* scale, Fp8Axis axis, int R, int Cc,
                                          Fp8Format f) {
    // Codes kept one per 32-bit word: neighbouring lanes' stores never share a word (the emulator's
    // racecheck tracks words; +1 column: the transposed reads fall in distinct banks).
    __shared__ uint32_t tile[kTile][kTile + 1];
    const int r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
        const int r = r0 + j, c = c0 + threadIdx.x;
        if (r < R && c < Cc) tile[j][threadIdx.x] = to_fp8_scaled(x[size_t(r) * Cc + c], scale_at(scale, axis, r, c), f);
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
        const int c = c0 + j, r = r0 + threadIdx.x;  // q's row c, column r
        if (r < R && c < Cc) q[size_t(c) * R + r] = uint8_t(tile[threadIdx.x][j]);
    }
}

/// out (N, OC) += bias (OC) on every row (the FP8 GEMM's bias where cuBLASLt's epilogue is not used).
template <typename T>
__global__ void add_bias_kernel(T* out, const T* bias, int N, int OC) {
    const size_t n = size_t(N) * OC, stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride)
        out[i] = from_float<T>(to_float(out[i]) + to_float(bias[i % size_t(OC)]));
}

}  // namespace

template <typename T>
void fp8_scales(float* scales, const T* x, int R, int Cc, Fp8Axis axis, Fp8Format f, cudaStream_t stream) {
    const int n = axis == Fp8Axis::tensor ? 1 : axis == Fp8Axis::rows ? R : Cc;
    unsigned* amax = reinterpret_cast<unsigned*>(scales);
    if (axis != Fp8Axis::rows) CUDA_CHECK(cudaMemsetAsync(scales, 0, size_t(n) * sizeof(float), stream));
    const int block = 256;
    if (axis == Fp8Axis::tensor) {
        launch(amax_tensor_kernel<T>, dim3(std::min(elementwise_grid(size_t(R) * Cc, block), 1024u)), dim3(block), 0,
               stream, amax, x, size_t(R) * Cc);
    } else if (axis == Fp8Axis::rows) {
        launch(amax_rows_kernel<T>, dim3(ceil_div(R, block / kWarpSize)), dim3(block), 0, stream, amax, x, R, Cc);
    } else {
        launch(amax_cols_kernel<T>, dim3(ceil_div(Cc, kTile), ceil_div(R, kColRows)), dim3(kTile, kTileRows), 0,
               stream, amax, x, R, Cc);
    }
    launch(scales_kernel, dim3(ceil_div(n, block)), dim3(block), 0, stream, scales, n, f);
}

template <typename T>
void fp8_quantize(uint8_t* q, const T* x, const float* scales, int R, int Cc, Fp8Axis axis, bool transpose,
                  Fp8Format f, cudaStream_t stream) {
    if (transpose)
        launch(quantize_transpose_kernel<T>, dim3(ceil_div(Cc, kTile), ceil_div(R, kTile)), dim3(kTile, kTileRows), 0,
               stream, q, x, scales, axis, R, Cc, f);
    else
        launch(quantize_kernel<T>, dim3(elementwise_grid(size_t(R) * Cc, 256)), dim3(256), 0, stream, q, x, scales,
               axis, R, Cc, f);
}

template <typename T>
void add_bias(T* out, const T* bias, int N, int OC, cudaStream_t stream) {
    launch(add_bias_kernel<T>, dim3(elementwise_grid(size_t(N) * OC, 256)), dim3(256), 0, stream, out, bias, N, OC);
}

#define INSTANTIATE(T)                                                                                        \
    template void fp8_scales<T>(float*, const T*, int, int, Fp8Axis, Fp8Format, cudaStream_t);             \
    template void fp8_quantize<T>(uint8_t*, const T*, const float*, int, int, Fp8Axis, bool, Fp8Format,   \
                                  cudaStream_t);                                                            \
    template void add_bias<T>(T*, const T*, int, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
