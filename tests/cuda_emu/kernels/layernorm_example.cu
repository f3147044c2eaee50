// tests/cuda_emu/kernels/layernorm_example.cu — the example kernel: LayerNorm forward, one warp per row.
//
// Each block stages weight and bias in dynamic shared memory (one __syncthreads), then each of its
// warps normalizes one row: lanes stride over the C channels, and two butterfly reductions
// (__shfl_xor_sync) give every lane the row's mean and variance. Written to the emulator's rules:
// launch through llmtrain::launch, explicit full masks, whole warps exit together, no reliance on
// thread or block order.
#include "tests/cuda_emu/kernels/layernorm_example.cuh"

#include "model/cuda/launch.cuh"

namespace llmtrain::example {
namespace {

constexpr int kWarpSize = 32;
constexpr int kBlockSize = 128;  // 4 warps: 4 rows per block

/// Sum of v over the 32 lanes of the warp, returned to every lane (butterfly reduction).
__device__ float warp_sum(float v) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

/// Grid: ceil(N / warps per block) blocks of kBlockSize threads; smem: 2*C floats.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C) {
    EXTERN_SHARED(float, params);
    float* s_weight = params;     // (C)
    float* s_bias = params + C;   // (C)
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        s_weight[i] = weight[i];
        s_bias[i] = bias[i];
    }
    __syncthreads();

    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;  // a whole warp leaves together, after the only barrier
    const float* x = inp + static_cast<size_t>(row) * C;  // (C)

    float sum = 0.0f;
    for (int i = lane; i < C; i += kWarpSize) sum += x[i];
    const float m = warp_sum(sum) / C;

    float sq = 0.0f;
    for (int i = lane; i < C; i += kWarpSize) {
        float d = x[i] - m;
        sq += d * d;
    }
    const float s = rsqrtf(warp_sum(sq) / C + 1e-5f);

    float* y = out + static_cast<size_t>(row) * C;  // (C)
    for (int i = lane; i < C; i += kWarpSize) y[i] = (x[i] - m) * s * s_weight[i] + s_bias[i];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, cudaStream_t stream) {
    const int rows_per_block = kBlockSize / kWarpSize;
    const size_t smem = 2 * static_cast<size_t>(C) * sizeof(float);
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
    const int grid = (N + rows_per_block - 1) / rows_per_block;
    launch(layernorm_forward_kernel, grid, kBlockSize, smem, stream, out, mean, rstd, inp, weight, bias, N, C);
}

}  // namespace llmtrain::example
