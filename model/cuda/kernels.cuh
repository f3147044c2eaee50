// model/cuda/kernels.cuh — the host-side launchers of every CUDA kernel of the backend.
//
// One .cu file per concept implements a group below (named in each comment). Every launcher is a
// template over the activation type T (float or __nv_bfloat16, instantiated for both), queues its
// kernels on `stream` and returns at once; shapes follow model/ops.hpp (B, T, C, NH, N = B*T, OC,
// V, Vp). `scratch` arguments are fp32 device workspaces of at least the matching *_scratch_bytes().
// CudaOps (cuda_ops.hpp) converts the Ops interface's void* tensors and calls these.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "model/adamw_math.hpp"
#include "model/fp8.hpp"
#include "model/cuda/common.cuh"
#include "model/cuda/cublas_attention.hpp"
#include "model/cuda/flash_attention.hpp"
#include "model/cuda/rope_table.hpp"

namespace llmtrain::cuda {

// ---- encoder.cu ----
/// out (B,T,C) = wte[inp - v0] + wpe[t] where v0 <= inp < v0 + nv, else exact zeros; inp (B,T) int32
/// device, wte (nv,C) the token rows [v0, v0 + nv). The whole table is v0 = 0, nv = INT_MAX. wpe
/// null: no positions (Llama), out = wte[inp - v0]. pos (B,T) int32 device: the row of wpe of each
/// position (reset_position_ids), null: t.
template <typename T>
void encoder_forward(T* out, const int* inp, const T* wte, const T* wpe, int B, int T_, int C, int v0, int nv,
                     cudaStream_t stream, const int* pos = nullptr);

/// Positions grouped by token for the deterministic wte gradient, on the device: bucket k holds
/// token bucket_token[k] and positions[bucket_start[k] .. bucket_start[k+1]) in ascending order;
/// its sum goes to dwte row bucket_token[k] - token0 (token0 = v0 for a vocab-parallel slice).
struct EncoderBuckets {
    const int* bucket_token = nullptr;
    const int* bucket_start = nullptr;
    const int* positions = nullptr;
    int n_buckets = 0;
    int token0 = 0;
};
/// Host side of the bucketing: from N token ids, the packed int array
/// [bucket_token (nb) | bucket_start (nb+1) | positions (N)], buckets in ascending token order;
/// returns nb.
int build_encoder_buckets(const int* tokens, int N, std::vector<int>& packed);
/// dwte += dout rows summed per token (one block per bucket); dwpe (maxT,C) += sum over b (skipped
/// when dwpe is null).
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const EncoderBuckets& buckets, int B, int T_, int C,
                      cudaStream_t stream);

// ---- layernorm.cu ----
/// LayerNorm of `a` (residual == null) or of residual = a + b (written, rounded to T). out (N,C),
/// mean/rstd (N) fp32.
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, T* residual, const T* a, const T* b, const T* weight,
                       const T* bias, int N, int C, cudaStream_t stream);
/// dinp (N,C) +=, dweight (C) +=, dbias (C) +=.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int N, int C, float* scratch, cudaStream_t stream);
size_t layernorm_backward_scratch_bytes(int N, int C);

// ---- rmsnorm.cu (Llama; Zhang & Sennrich 2019) ----
/// RMSNorm of `a` (residual == null) or of residual = a + b (written, rounded to T): out (N,C) =
/// x * rstd * weight, rstd (N) fp32 = 1/sqrt(mean(x^2) + eps). C % 8 == 0.
template <typename T>
void rmsnorm_forward(T* out, float* rstd, T* residual, const T* a, const T* b, const T* weight, int N, int C,
                     float eps, cudaStream_t stream);
/// dinp (N,C) +=, dweight (C) += (Ops::rmsnorm_backward); scratch: rmsnorm_backward_scratch_bytes.
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd, int N,
                      int C, float* scratch, cudaStream_t stream);
size_t rmsnorm_backward_scratch_bytes(int N, int C);

// ---- qk_norm.cu (Qwen3's QK-norm: RMSNorm over each q and k head) ----
/// In place on the q|k heads of qkv (N,(NH + 2 NKV) HS): pre (N,(NH + NKV) HS) = q|k before, rstd
/// (N, NH + NKV) fp32, each q head x * rstd * wq (HS), each k head x * rstd * wk (Ops::qk_norm_forward).
template <typename T>
void qk_norm_forward(T* qkv, T* pre, float* rstd, const T* wq, const T* wk, int N, int NH, int NKV, int HS, float eps,
                     cudaStream_t stream);
/// d q|k in place in dqkv, dwq and dwk (HS) += (Ops::qk_norm_backward); scratch:
/// qk_norm_backward_scratch_bytes.
template <typename T>
void qk_norm_backward(T* dqkv, T* dwq, T* dwk, const T* pre, const T* wq, const T* wk, const float* rstd, int N,
                      int NH, int NKV, int HS, float* scratch, cudaStream_t stream);
size_t qk_norm_backward_scratch_bytes(int N, int NH, int NKV, int HS);

// ---- rope.cu (Llama; Su et al. 2021) ----
/// Rotary embedding in place on the q and k heads of qkv (B,T,(NH + 2 NKV)*HS), HuggingFace's
/// rotate-half pairs (Ops::rope_forward); backward = true turns a gradient back (angle -a). table:
/// rope_table (rope_table.hpp) at (T_, HS) and the model's theta, on the device. pos (B,T) int32
/// device in [0, the table's rows): each position's angle row (Ops::rope_forward_pos); null: t.
template <typename T>
void rope(T* qkv, const float* table, int B, int T_, int NH, int NKV, int HS, bool backward, cudaStream_t stream,
          const int* pos = nullptr);

// ---- swiglu.cu (Llama; Shazeer 2020) ----
/// out (N,F) = silu(gate) * up, inp (N,2F) = [gate | up] per row.
template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int F, cudaStream_t stream);
/// dinp (N,2F) (overwritten) from dout (N,F).
template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int N, int F, cudaStream_t stream);

// ---- gqa.cu (grouped-query attention, Ainslie et al. 2023, around the multi-head kernels) ----
/// dst (B,T,3C) multi-head qkv, C = NH*HS, from src (B,T,(NH + 2 NKV)*HS): k/v head h is a copy of
/// key/value head h / (NH/NKV).
template <typename T>
void gqa_expand(T* dst, const T* src, int B, int T_, int NH, int NKV, int HS, cudaStream_t stream);
/// dst (B,T,(NH + 2 NKV)*HS) from a multi-head gradient src (B,T,3C): dq copied, dk/dv of key/value
/// head g = sum over its NH/NKV query heads (head order, fp32).
template <typename T>
void gqa_reduce(T* dst, const T* src, int B, int T_, int NH, int NKV, int HS, cudaStream_t stream);

// ---- matmul.cu ----
/// One GEMM problem's cuBLASLt state, made the first time the problem is seen and kept: its matmul
/// descriptor (the bias and aux pointers are set again on every call), the layouts of A, B and D
/// (C is D), and the chosen algorithm.
struct LtPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
};
/// cuBLASLt handle, its workspace, and a plan per problem (owned by CudaOps; creating descriptors
/// and querying the heuristic cost tens of microseconds, so they run once per problem).
struct LtContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    /// model.matmul_autotune: time the heuristic's first kAutotuneCandidates algorithms on a
    /// problem's first call and keep the fastest (per LtContext, so per process); false keeps the
    /// heuristic's first, the same algorithm in every run (docs/cuda.md "cuBLASLt plans").
    bool autotune = false;
    /// (transa, transb, m, n, k, lda, ldb, ldd, epilogue, dtype, accumulate, pointer alignment) -> plan
    using Key = std::tuple<bool, bool, int, int, int, int, int, int, int, int, bool, uint32_t>;
    std::map<Key, LtPlan> plans;
    LtContext() = default;
    LtContext(const LtContext&) = delete;
    LtContext& operator=(const LtContext&) = delete;
    ~LtContext();  ///< destroys the plans' descriptors (matmul.cu)
};
/// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias; with pre_gelu: pre_gelu = that, out = gelu(it).
template <typename T>
void matmul_forward(LtContext& lt, T* out, T* pre_gelu, const T* inp, const T* weight, const T* bias,
                    int N, int C, int OC, cudaStream_t stream);
/// dinp (N,C) = dout @ weight [* gelu'(pre_gelu)]; dweight (OC,C) += dout^T inp; dbias (OC) += sums.
template <typename T>
void matmul_backward(LtContext& lt, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                     const T* weight, const T* pre_gelu, int N, int C, int OC, float* scratch, cudaStream_t stream);
size_t matmul_backward_scratch_bytes(int N, int OC);
/// dbias (OC) += column sums of dout (N,OC), deterministic (reduce.cuh); scratch of
/// matmul_backward_scratch_bytes(N, OC).
template <typename T>
void bias_backward(T* dbias, const T* dout, int N, int OC, float* scratch, cudaStream_t stream);
/// FP8 GEMM, cuBLASLt's "TN" layout (the only one Ada and Hopper run): D (m x n column-major, ld m,
/// T) = a_scale[i] * b_scale[j] * sum_k A(k,i) B(k,j) [+ bias (m, T)] [+ D if accumulate], A (k x m)
/// and B (k x n) column-major FP8 of formats fa, fb with leading dimension k (row-major: A is (m,k),
/// B is (n,k)); the scales are device fp32 inverse scales, one each or, with outer_vec, m and n of
/// them. Products summed in fp32. Errors: CudaError when cuBLASLt refuses (e.g. k or a leading
/// dimension not a multiple of 16, a device below compute capability 8.9).
template <typename T>
void matmul_fp8(LtContext& lt, T* D, const uint8_t* A, Fp8Format fa, const float* a_scale, const uint8_t* B,
                Fp8Format fb, const float* b_scale, bool outer_vec, int m, int n, int k, bool accumulate,
                const T* bias, cudaStream_t stream);

// ---- fp8_quantize.cu: current scaling (docs/fp8.md) ----
/// Which scales an FP8 copy of x (R, Cc) uses: one, one per row r, one per column c.
enum class Fp8Axis : int { tensor, rows, cols };
/// scales[0, n) = fp8_scale_from_amax of x's amax along `axis` for format f, scales[n, 2n) their
/// inverses; n = 1, R or Cc. x (R, Cc) row-major T. Deterministic (a max, in any order).
template <typename T>
void fp8_scales(float* scales, const T* x, int R, int Cc, Fp8Axis axis, Fp8Format f, cudaStream_t stream);
/// q = fp8(x * scale) (format f, saturating, model/fp8.hpp), (R, Cc) or with transpose (Cc, R);
/// scales as fp8_scales made them for the same axis.
template <typename T>
void fp8_quantize(uint8_t* q, const T* x, const float* scales, int R, int Cc, Fp8Axis axis, bool transpose,
                  Fp8Format f, cudaStream_t stream);
/// out (N, OC) += bias (OC) on every row.
template <typename T>
void add_bias(T* out, const T* bias, int N, int OC, cudaStream_t stream);

// ---- attention.cu ----
/// out (B,T,C), lse (B,NH,T) fp32 from qkv (B,T,3C). doc: null (causal), or Ops::attention_forward_doc's
/// doc_start (B,T) int32 on the device (block-causal). Errors: std::invalid_argument if C/NH > 128.
template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, cudaStream_t stream,
                       const int* doc = nullptr);
/// dqkv (B,T,3C) overwritten; doc as attention_forward.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B, int T_,
                        int C, int NH, float* scratch, cudaStream_t stream, const int* doc = nullptr);
size_t attention_backward_scratch_bytes(int B, int T_, int NH);
/// delta (B,NH,T) fp32 = rowsum(dout o out) per head (FlashAttention-2's D), from dout, out (B,T,C).
template <typename T>
void attention_delta(float* delta, const T* dout, const T* out, int B, int T_, int C, int NH, cudaStream_t stream);

// ---- flash_forward.cu, flash_backward.cu (model.attention = "native" in bf16, head size 64 or 128) ----
/// As attention_forward, bf16, on tensor cores (mma.sync, FlashAttention-2); grouped-query when
/// NKV < NH (qkv (B,T,(NH + 2 NKV)*HS), C = NH*HS, query head h reading key/value head h / (NH/NKV);
/// NKV = NH: qkv (B,T,3C)). doc: null (causal) or Ops::attention_forward_doc's doc_start (B,T) int32 on
/// the device (block-causal; key blocks wholly before a block's documents are skipped).
/// Errors: std::invalid_argument for a shape flash_attention_supported rejects, NKV not dividing
/// NH, a batch row of qkv of 2^31 elements or more (T x (C + 2 NKV HS)), or a pointer not 16-byte
/// aligned.
void flash_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T_, int C, int NH,
                             int NKV, cudaStream_t stream, const int* doc = nullptr);
/// As attention_backward (dqkv overwritten), on tensor cores: a fused kernel and a fixed-order dQ sum,
/// with the backward tile `tile` (flash_attention.hpp): the device's, flash_backward_tile(C / NH,
/// its opt-in shared memory per block), which the caller keeps (CudaOps::flash_tile; not looked up
/// per call). scratch: flash_attention_backward_scratch_bytes(B, T_, C, NH, tile.keys) bytes (D
/// and the dQ partials), 16-byte aligned. Errors: as flash_attention_forward, and
/// std::invalid_argument for a tile other than the head size's large or small one; a tile the
/// device cannot hold fails its launch (CudaError): flash_attention_backward_tiled
/// (flash_attention.hpp) checks that by name. doc: as flash_attention_forward (a key block's walk
/// over the queries ends where their documents start after its keys); with doc the backward runs
/// the head size's small tile whatever `tile` is, and scratch must be sized for its keys.
void flash_attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, int B, int T_, int C, int NH, int NKV,
                              FlashBackwardTile tile, float* scratch, cudaStream_t stream, const int* doc = nullptr);

// ---- cublas_attention.cu (model.attention = "cublas"; the tiling is cublas_attention.hpp's) ----
/// As attention_forward, on tensor cores: per tile of plan.tile_rows query rows, S = QK^T/sqrt(HS)
/// and out = PV as cuBLAS strided-batched GEMMs over the B*NH heads. Grouped-query attention
/// (Ainslie et al. 2023): qkv (B,T,(NH + 2 NKV)*HS), C = NH*HS, query head h reading key/value head
/// h / (NH/NKV); NKV = NH is multi-head (qkv (B,T,3C)). `handle` must already be bound
/// to `stream` (and its cuBLAS workspace); `workspace` is device memory of plan.workspace_bytes.
/// doc: null, or Ops::attention_forward_doc's doc_start (B,T) int32 on the device: query i then
/// sees keys doc[b,i] <= j <= i only, the mask applied in the softmax kernels (the GEMMs still
/// cover every causal key of the tile).
/// Errors: std::invalid_argument if C % NH != 0; CudaError when a cuBLAS call fails.
/// rows: the whole window (default) or some query rows of it (CublasRows; Ops::attention_forward_rows).
template <typename T>
void cublas_attention_forward(cublasHandle_t handle, T* out, float* lse, const T* qkv, int B, int T_, int C,
                              int NH, int NKV, const CublasAttentionPlan& plan, void* workspace, cudaStream_t stream,
                              const int* doc = nullptr, const CublasRows& rows = {});
/// dqkv (B,T,(NH + 2 NKV)*HS) overwritten, recomputing P per tile from qkv and lse (FlashAttention-2's
/// backward equations; a key/value head's gradient summed over its query heads); same handle, plan
/// (backward = true) and workspace rules as the forward. With rows of a window (nq >= 0): dout, out
/// and lse at the rows' places, and dqkv added to (the rows' dQ, every key's dK and dV).
template <typename T>
void cublas_attention_backward(cublasHandle_t handle, T* dqkv, const T* dout, const T* qkv, const T* out,
                               const float* lse, int B, int T_, int C, int NH, int NKV,
                               const CublasAttentionPlan& plan, void* workspace, cudaStream_t stream,
                               const int* doc = nullptr, const CublasRows& rows = {});

// ---- gelu.cu ----
template <typename T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t stream);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n, cudaStream_t stream);

// ---- classifier.cu ----
/// losses (N) fp32; logits (N,Vp) overwritten with dloss * (softmax - onehot) when write_grad.
template <typename T>
void fused_classifier(T* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss,
                      bool write_grad, cudaStream_t stream);
/// Vocab-parallel pass 1 over logits (N,nv), the columns [v0, v0 + nv) of the padded vocab
/// (columns >= V are padding): stats (N,3) fp32 = (local max, sum of exp(x - max), target logit
/// or 0) per row (Ops::classifier_partial). Any nv >= 1; 16-byte packs when nv % 8 == 0 and logits
/// is 16-byte aligned.
template <typename T>
void classifier_partial(float* stats, const T* logits, const int* targets, int N, int nv, int v0, int V,
                        cudaStream_t stream);
/// Vocab-parallel pass 2 from all (tp,N,3) fp32, every rank's stats in rank order: losses (N) fp32;
/// logits (N,nv) overwritten with the gradient when write_grad (Ops::classifier_finish).
template <typename T>
void classifier_finish(T* logits, float* losses, const float* all, int tp, const int* targets, int N, int nv,
                       int v0, int V, float dloss, bool write_grad, cudaStream_t stream);

// ---- adamw.cu ----
/// One AdamW step (model/adamw_math.hpp's constants c) on n elements, the first being element index0
/// of the flat parameter buffer; bf16 params round stochastically when `stochastic`.
template <typename T>
void adamw_update(T* params, float* master, const T* grads, float* m, float* v, size_t n, const AdamWCoeffs& c,
                  bool stochastic, size_t index0, cudaStream_t stream);
/// out[0] = (accumulate ? out[0] : 0) + sum x^2, deterministic two-stage sum.
template <typename T>
void norm_squared(float* out, const T* x, size_t n, bool accumulate, float* scratch, cudaStream_t stream);
size_t norm_squared_scratch_bytes();

// ---- elementwise.cu ----
template <typename Dst, typename Src>
void cast(Dst* dst, const Src* src, size_t n, cudaStream_t stream);
template <typename T>
void scale(T* x, float s, size_t n, cudaStream_t stream);
template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream);

}  // namespace llmtrain::cuda
