// model/backend.cpp — make_backend: picks the CPU or CUDA backend by name (see backend.hpp).
#include "model/backend.hpp"

#include <stdexcept>

#include "model/cpu/cpu_ops.hpp"
#include "model/cuda/cuda_backend.hpp"

namespace llmtrain {

// The CUDA hook: make_cuda_backend is defined by llmtrain_cuda (nvcc) or llmtrain_cuda_emu (the CPU
// emulator) when the executable links one of them; in a CPU-only executable this weak reference
// is null. It throws when no device is present, and "auto" then falls back to the CPU.
std::unique_ptr<Ops> make_cuda_backend(const std::string& precision, const CudaBackendOptions& options)
    __attribute__((weak));

std::unique_ptr<Ops> make_backend(const std::string& name, const std::string& precision) {
    if (precision != "fp32" && precision != "bf16")
        throw std::runtime_error("backend: precision must be \"fp32\" or \"bf16\", got \"" + precision + "\"");
    if (name == "cpu") {
        if (precision != "fp32")
            throw std::runtime_error("backend: the cpu backend computes in fp32 only; precision \"" +
                                     precision + "\" needs backend = \"cuda\"");
        return make_cpu_backend();
    }
    if (name == "cuda" || name == "auto") {
        if (make_cuda_backend != nullptr) {
            if (name == "cuda") return make_cuda_backend(precision, {});
            try {
                return make_cuda_backend(precision, {});
            } catch (const std::runtime_error&) {
            }
        } else if (name == "cuda") {
            throw std::runtime_error("backend \"cuda\": this build has no CUDA backend (rebuild with the "
                                     "CUDA toolkit), use backend = \"cpu\"");
        }
        if (precision != "fp32")
            throw std::runtime_error("backend \"auto\": no CUDA device, and the cpu backend runs fp32 "
                                     "only, not \"" + precision + "\"");
        return make_cpu_backend();
    }
    throw std::runtime_error("backend: unknown backend \"" + name + "\" (expected \"cpu\", \"cuda\" or \"auto\")");
}

}  // namespace llmtrain
