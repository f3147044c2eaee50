// model/backend.cpp — make_backend: picks the CPU or CUDA backend by name (see backend.hpp).
//
// The CUDA hook: make_cuda_backend() and cuda_device_count() (model/cuda/cuda_backend.hpp) are
// referenced weakly. They resolve only in executables that link a CUDA backend object library
// (llmtrain_cuda with nvcc, llmtrain_cuda_emu on the emulator); elsewhere their address is null
// and "cuda" is refused with a clear message, so CPU-only binaries need no CUDA runtime.
#include "model/backend.hpp"

#include <stdexcept>
#include <string>

#include "model/cpu/cpu_ops.hpp"
#include "model/cuda/cuda_backend.hpp"
#include "model/cuda/flash_attention.hpp"

namespace llmtrain {

std::unique_ptr<Ops> make_cuda_backend(const std::string& precision, const CudaBackendOptions& options)
    __attribute__((weak));
int cuda_device_count() __attribute__((weak));

Attention parse_attention(const std::string& name) {
    if (name == "auto") return Attention::automatic;
    if (name == "native") return Attention::native;
    if (name == "cublas") return Attention::cublas;
    if (name == "cudnn") return Attention::cudnn;
    throw std::invalid_argument("model.attention: expected \"auto\", \"native\", \"cublas\" or \"cudnn\", got \"" +
                                name + "\"");
}

const char* attention_name(Attention a) {
    switch (a) {
        case Attention::native: return "native";
        case Attention::cublas: return "cublas";
        case Attention::cudnn: return "cudnn";
        case Attention::automatic: break;
    }
    return "auto";
}

namespace {

/// FlashAttention-2's shared memory at env.head_size against the device's opt-in limit: "" when it
/// fits or either is unknown, else "FlashAttention-2 at head size H needs N B of shared memory per
/// block, this device allows L B".
std::string flash_smem_shortfall(const AttentionEnv& env) {
    if (!cuda::flash_attention_supported(env.head_size, 1) || env.smem_optin <= 0) return "";  // attention.cu, or unknown
    const size_t need = cuda::flash_attention_smem_bytes(env.head_size);
    if (need <= size_t(env.smem_optin)) return "";
    return "FlashAttention-2 at head size " + std::to_string(env.head_size) + " needs " + std::to_string(need) +
           " B of shared memory per block, this device allows " + std::to_string(env.smem_optin) +
           " B (cudaDevAttrMaxSharedMemoryPerBlockOptin)";
}

}  // namespace

std::string attention_fit_error(Attention path, const AttentionEnv& env) {
    if (path != Attention::native || !env.bf16) return "";  // fp32 runs attention.cu (< 48 KiB)
    const std::string shortfall = flash_smem_shortfall(env);
    if (shortfall.empty()) return "";
    return "model.attention = \"native\": " + shortfall + "; use \"auto\" or \"cublas\"";
}

AttentionChoice resolve_attention(Attention requested, const AttentionEnv& env) {
    if (requested != Attention::automatic) return {requested, "set in the config"};
    // Without cuDNN's fused attention: our FlashAttention-2 on tensor cores where it runs (bf16
    // mma.sync needs sm_80; head sizes 64 and 128, flash_forward.cu and flash_backward.cu; its shared
    // memory within the device's opt-in limit), else cuBLAS's GEMMs around our softmax.
    const std::string shortfall = env.bf16 && env.cc_major >= 8 ? flash_smem_shortfall(env) : "";
    const bool flash = env.bf16 && env.cc_major >= 8 && (env.head_size == 64 || env.head_size == 128) &&
                       shortfall.empty();
    const auto fallback = [&](const std::string& why) {
        if (flash)
            return AttentionChoice{Attention::native, "auto: " + why + "; FlashAttention-2 on tensor cores, bf16, head size " +
                                                          std::to_string(env.head_size)};
        return AttentionChoice{Attention::cublas, "auto: " + why + (shortfall.empty() ? "" : "; " + shortfall)};
    };
    if (env.cudnn_version == 0) return fallback("this build has no cuDNN");
    const int v = env.cudnn_version;  // major*10000 + minor*100 + patch since cuDNN 9
    const std::string cudnn = "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                              std::to_string(v % 100);
    if (!env.bf16) return fallback("training.precision is fp32 and " + cudnn + "'s fused attention is bf16 only");
    if (env.cc_major < 8) return fallback(cudnn + "'s fused flash attention needs sm_80 or newer");
    if (env.cc_major == 10)  // cudnn_attention.cu refuses a backward it cannot make deterministic there
        return fallback(cudnn + " has no deterministic attention backward on sm_10x without engine knobs");
    const int max_head = env.cc_major == 9 ? 256 : 128;
    if (env.head_size != 0 && (env.head_size % 8 != 0 || env.head_size > max_head))
        return fallback("head size " + std::to_string(env.head_size) + " is not a multiple of 8 up to " +
                      std::to_string(max_head) + " (" + cudnn + "'s fused attention on sm_" +
                      std::to_string(env.cc_major) + "x)");
    std::string why = "auto: " + cudnn + " present, bf16";
    if (env.head_size != 0) why += ", head size " + std::to_string(env.head_size);
    return {Attention::cudnn, why};
}

std::unique_ptr<Ops> make_backend(const std::string& name, const std::string& precision,
                                  const CudaBackendOptions& cuda_options) {
    if (precision != "fp32" && precision != "bf16")
        throw std::runtime_error("backend: precision must be \"fp32\" or \"bf16\", got \"" + precision + "\"");
    const bool have_cuda = &make_cuda_backend != nullptr && &cuda_device_count != nullptr;
    if (name == "cuda") {
        if (!have_cuda)
            throw std::runtime_error("backend \"cuda\": this build has no CUDA backend (this executable was "
                                     "linked without it); use backend = \"cpu\"");
        return make_cuda_backend(precision, cuda_options);
    }
    if (name == "auto" && have_cuda && cuda_device_count() > 0) return make_cuda_backend(precision, cuda_options);
    if (name == "cpu" || name == "auto") {
        if (precision != "fp32")
            throw std::runtime_error("backend \"" + name + "\": the cpu backend computes in fp32 only; precision \"" +
                                     precision + "\" needs a CUDA device");
        return make_cpu_backend();
    }
    throw std::runtime_error("backend: unknown backend \"" + name + "\" (expected \"cpu\", \"cuda\" or \"auto\")");
}

}  // namespace llmtrain
