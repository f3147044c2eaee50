// model/cuda/cudnn_attention.hpp — causal attention through cuDNN's fused flash-attention engine
// (cuDNN graph API, backend descriptors), the fast path behind model.attention = "cudnn".
//
// Same contract as the native kernels (attention.cu): qkv (B,T,3C) bf16 holding q | k | v with
// heads of HS = C/NH, out (B,T,C) bf16, lse (B,NH,T) fp32 = log-sum-exp of each row of the scaled,
// causally masked scores; backward overwrites dqkv (B,T,3C), deterministically (the same bits
// every run: cudnn_attention.cu's header). bf16 only (cuDNN's fused attention has no fp32 path).
// Grouped-query attention (Ainslie et al. 2023): with NKV key/value heads (NKV divides NH), qkv and
// dqkv are (B,T,(NH + 2 NKV)*HS) = q | k | v, query head h reading key/value head h / (NH/NKV) —
// the graph takes K and V with NKV heads (no expanded copy); NKV = NH is the multi-head case above.
// Compiled by nvcc when cuDNN is found; never built under cuda_emu (the engine is a closed
// tensor-core kernel): test_cuda_gpu checks it against the CPU backend on a machine with a GPU.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace llmtrain::cuda {

class CudnnAttention {
public:
    /// Creates the cuDNN handle on the current device. Errors: CudaError when cuDNN cannot initialize.
    CudnnAttention();
    /// cudnnGetVersion() of the loaded library, e.g. 91900 for 9.19.0.
    static int version();
    ~CudnnAttention();
    CudnnAttention(const CudnnAttention&) = delete;
    CudnnAttention& operator=(const CudnnAttention&) = delete;

    /// Bytes of device workspace forward (backward = false) or backward needs at this shape; builds
    /// the plan once per shape. Errors: CudaError naming the step when cuDNN rejects the graph or
    /// finds no engine (for the backward: no deterministic one; always on sm_10x devices).
    /// NKV key/value heads (grouped-query; the graph with NKV < NH may be refused where the multi-head
    /// one is not: the caller then falls back to an expanded copy, cuda_ops.cu).
    size_t workspace_bytes(bool backward, int B, int T, int C, int NH, int NKV);
    size_t workspace_bytes(bool backward, int B, int T, int C, int NH) {
        return workspace_bytes(backward, B, T, C, NH, NH);
    }
    /// out (B,T,C), lse (B,NH,T) from qkv (B,T,(NH + 2 NKV)*HS), with `workspace` of
    /// workspace_bytes(false, ...) bytes, 256-byte aligned (the caller owns it, so it counts in the
    /// Allocator's workspace).
    void forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int C, int NH, int NKV,
                 void* workspace, cudaStream_t stream);
    void forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int C, int NH,
                 void* workspace, cudaStream_t stream) {
        forward(out, lse, qkv, B, T, C, NH, NH, workspace, stream);
    }
    /// dqkv (B,T,(NH + 2 NKV)*HS) overwritten from dout (B,T,C), qkv, out and lse of the forward,
    /// with `workspace` of workspace_bytes(true, ...) bytes; dK and dV of key/value head g are the
    /// sums over its NH/NKV query heads (cuDNN's reduction, inside the plan).
    void backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                  const __nv_bfloat16* out, const float* lse, int B, int T, int C, int NH, int NKV, void* workspace,
                  cudaStream_t stream);
    void backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                  const __nv_bfloat16* out, const float* lse, int B, int T, int C, int NH, void* workspace,
                  cudaStream_t stream) {
        backward(dqkv, dout, qkv, out, lse, B, T, C, NH, NH, workspace, stream);
    }

private:
    struct Plan {
        void* plan = nullptr;       ///< cudnnBackendDescriptor_t of the execution plan
        int64_t workspace = 0;      ///< bytes the plan needs
        std::vector<void*> keep;    ///< every descriptor the plan was built from (destroyed with it)
    };
    Plan& plan_for(bool backward, int B, int T, int C, int NH, int NKV);

    void* handle_ = nullptr;  ///< cudnnHandle_t
    int cc_major_ = 0;        ///< the device's compute capability major
    std::map<std::tuple<bool, int, int, int, int, int>, Plan> plans_;  ///< by (backward, B, T, C, NH, NKV)
};

}  // namespace llmtrain::cuda
