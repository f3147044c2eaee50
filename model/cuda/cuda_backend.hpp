// model/cuda/cuda_backend.hpp — the entry points of the CUDA backend, for model/backend.cpp.
//
// Plain C++ (no CUDA headers), so the CPU-only parts of the build can include it. The backend is
// compiled twice: by nvcc into llmtrain_cuda (real GPUs) and by g++ against emu/ into
// llmtrain_cuda_emu (the CPU emulator that the tests run); both export these functions.
#pragma once
#include <memory>
#include <string>

#include "model/ops.hpp"

namespace llmtrain {

/// model.attention, parsed once (parse_attention): our kernels on CUDA cores, cuBLAS GEMMs on tensor
/// cores around our softmax (tiled over queries), cuDNN's fused attention (docs/attention.md), or
/// automatic: the fastest of these the build, precision and shape allow (resolve_attention).
enum class Attention { native, cublas, cudnn, automatic };

/// What resolve_attention looks at, found by the CUDA backend at start-up.
struct AttentionEnv {
    /// cudnnGetVersion() of the loaded cuDNN (e.g. 91900 for 9.19.0); 0 when the build has no cuDNN.
    int cudnn_version = 0;
    bool bf16 = false;  ///< training.precision = "bf16" (cuDNN's fused attention has no fp32 path)
    int head_size = 0;  ///< n_embd / n_head; 0 when not known (the check is left to cuDNN's graph)
    int cc_major = 0;   ///< the device's compute capability major: 8 Ampere, 9 Hopper, 10 Blackwell
    /// Bytes of shared memory one block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin:
    /// 232,448 on sm_90, 166,912 on sm_80, 101,376 on sm_86/89/120); 0 when not known (not checked).
    int smem_optin = 0;
};

/// A resolved attention path and, for the start-up log, why it was chosen.
struct AttentionChoice {
    Attention path = Attention::native;
    std::string why;
};

/// Resolves model.attention on the CUDA backend; a pure function of `requested` and `env` so every
/// case is testable without cuDNN. native, cublas and cudnn are returned as they are ("set in the
/// config"; make_cuda_backend rejects an impossible cudnn). automatic gives cudnn when the build has
/// cuDNN, the precision is bf16, the device is sm_80 or newer but not sm_10x (cuDNN's deterministic
/// backward there needs engine knobs this backend does not set; cudnn-frontend 1.x) and the head
/// size suits cuDNN's fused attention (a multiple of 8, at most 256 on sm_90 and 128 elsewhere:
/// cudnn-frontend's SDPA support checks); else native when its FlashAttention-2 kernels run (bf16,
/// sm_80 or newer, head size 64 or 128: flash_forward.cu and flash_backward.cu, and every one of its kernels' shared
/// memory, flash_attention_smem_bytes, within env.smem_optin); else cublas (tensor cores, any head
/// size, fp32 too). The why reads e.g. "auto: cuDNN 9.19.0, bf16, head size 64". Never throws.
AttentionChoice resolve_attention(Attention requested, const AttentionEnv& env);

/// Why `path` cannot run in env, or "" when it can (as far as env tells): native in bf16 at a head
/// size the FlashAttention-2 kernels take (64, 128) needs flash_attention_smem_bytes(head_size) of
/// shared memory per block, at most env.smem_optin (unchecked when 0). The text names
/// model.attention, the head size, the need and the device's limit. make_cuda_backend throws it as
/// std::invalid_argument. Never throws.
std::string attention_fit_error(Attention path, const AttentionEnv& env);

/// Attention path -> its config spelling ("native", "cublas", "cudnn", "auto").
const char* attention_name(Attention a);

/// model.attention_workspace_mb's default: the cublas path's scores of GPT-2 1.5B at micro-batch 8
/// (B*NH*T*T = 8*25*1024*1024 scores of 4 + 2 bytes, bf16) fit in one tile, llm.c's layout.
constexpr int kDefaultAttentionWorkspaceMb = 1200;

/// "auto" | "native" | "cublas" | "cudnn" -> Attention. Errors: std::invalid_argument naming
/// model.attention.
Attention parse_attention(const std::string& name);

/// Options of the CUDA backend beyond the precision.
struct CudaBackendOptions {
    /// Round the fp32 master weights to bf16 params stochastically in AdamW (bf16 mode only).
    bool stochastic_rounding = false;
    /// model.attention: native (our kernels), cublas (cuBLAS batched GEMMs + our softmax, fp32 or
    /// bf16), cudnn (cuDNN fused attention; bf16, needs a build with cuDNN) or automatic (resolved
    /// once by make_cuda_backend, resolve_attention). The config's default is "auto"; this one stays
    /// native so that tests and tools that name no path get our kernels.
    Attention attention = Attention::native;
    /// n_embd / n_head, for automatic's head-size check; 0 = unknown (cuDNN's graph decides).
    int head_size = 0;
    /// model.attention_workspace_mb: MiB of fp32 scores + probabilities one cublas attention tile may
    /// use (model/cuda/cublas_attention.hpp); >= 1.
    int attention_workspace_mb = kDefaultAttentionWorkspaceMb;
    /// model.matmul_autotune: time cuBLASLt's candidate algorithms on each GEMM shape's first call
    /// and keep the fastest. Off: the heuristic's first, the same in every run; on: faster where the
    /// heuristic misjudges, but two processes may choose differently, so runs are no longer
    /// bitwise repeatable (docs/cuda.md "cuBLASLt plans").
    bool matmul_autotune = false;
    /// The rank's index among the ranks on its node (parallel/comm.hpp local_rank(), from MPI's node
    /// map; the app passes it: model/ does not read launchers' variables). The device is local_rank
    /// mod the device count. Default 0 (one process).
    int local_rank = 0;
};

/// Number of CUDA devices visible (0 when there is none or no driver; never throws).
int cuda_device_count();

/// Creates the CUDA backend on device (options.local_rank mod device count) with act dtype from
/// `precision` ("bf16" or "fp32"). Attention::automatic is resolved here (resolve_attention), the
/// choice readable through Ops::attention_name / attention_reason; if cuDNN then rejects the graph at
/// the first attention call of a shape, the backend falls back to cublas and says so on stderr.
/// Errors: std::invalid_argument for another precision, cudnn attention without cuDNN in the build
/// or with fp32, native attention whose FlashAttention-2 kernels need more shared memory than the
/// device allows (attention_fit_error), or attention_workspace_mb < 1; std::runtime_error when no device is present or
/// CUDA/cuBLASLt/cuDNN fails to initialize.
std::unique_ptr<Ops> make_cuda_backend(const std::string& precision, const CudaBackendOptions& options = {});

}  // namespace llmtrain
