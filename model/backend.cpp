// model/backend.cpp — make_backend: picks the CPU or CUDA backend by name (see backend.hpp).
//
// The CUDA hook: make_cuda_backend() and cuda_device_count() (model/cuda/cuda_backend.hpp) are
// referenced weakly. They resolve only in executables that link a CUDA backend object library
// (llmtrain_cuda with nvcc, llmtrain_cuda_emu on the emulator); elsewhere their address is null
// and "cuda" is refused with a clear message, so CPU-only binaries need no CUDA runtime.
#include "model/backend.hpp"

#include <stdexcept>

#include "model/cpu/cpu_ops.hpp"
#include "model/cuda/cuda_backend.hpp"

namespace llmtrain {

std::unique_ptr<Ops> make_cuda_backend(const std::string& precision, const CudaBackendOptions& options)
    __attribute__((weak));
int cuda_device_count() __attribute__((weak));

Attention parse_attention(const std::string& name) {
    if (name == "native") return Attention::native;
    if (name == "cublas") return Attention::cublas;
    if (name == "cudnn") return Attention::cudnn;
    throw std::invalid_argument("model.attention: expected \"native\", \"cublas\" or \"cudnn\", got \"" + name +
                                "\"");
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
