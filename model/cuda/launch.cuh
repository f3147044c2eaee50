// model/cuda/launch.cuh — how the CUDA backend launches kernels, declares dynamic shared memory and
// checks runtime calls, identically under nvcc and under the CPU emulator (emu/).
//
// Every kernel launch goes through llmtrain::launch: under nvcc it is kernel<<<grid, block, smem,
// stream>>>(args...); under EMU_BUILD (g++ with emu/prelude.hpp) it is the emulator's
// deferred launch, which also checks that pointer arguments are device memory. Both then check the
// launch error, so a bad configuration throws at the launch site.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace llmtrain {

/// A failed CUDA runtime call: "<file>:<line>: <call> failed: <cudaErrorName>: <description>"
/// (+ the emulator's detailed explanation under EMU_BUILD).
struct CudaError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Throws CudaError unless err == cudaSuccess. Use through CUDA_CHECK(call).
inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
    if (err == cudaSuccess) return;
    std::string msg = std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                      cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
#ifdef EMU_BUILD
    if (std::string detail = ::emu::last_error_message(); !detail.empty()) msg += "\n  cuda_emu: " + detail;
#endif
    throw CudaError(msg);
}

}  // namespace llmtrain

/// Checks a cudaError_t-returning call; throws llmtrain::CudaError with file:line and the error.
#define CUDA_CHECK(call) ::llmtrain::cuda_check((call), #call, __FILE__, __LINE__)

/// Declares `name` as a `type*` to the block's dynamic shared memory (the launch's smem bytes,
/// 16-byte aligned). Use once per kernel: EXTERN_SHARED(float, smem); smem[threadIdx.x] = ...
#ifdef EMU_BUILD
#define EXTERN_SHARED(type, name) type* name = reinterpret_cast<type*>(::emu::detail::dynamic_smem())
#else
#define EXTERN_SHARED(type, name)                                    \
    extern __shared__ __align__(16) unsigned char llmtrain_dyn_smem_[]; \
    type* name = reinterpret_cast<type*>(llmtrain_dyn_smem_)
#endif

namespace llmtrain {

/// Launches kernel(args...) on grid x block threads with `smem` bytes of dynamic shared memory on
/// `stream`; args convert to the kernel's parameter types. Asynchronous: the kernel runs in stream
/// order. Errors: throws CudaError for an invalid configuration (block > 1024 threads, zero or
/// oversized grid, smem above the kernel's limit) and, under the emulator, for a pointer argument
/// that is not device or pinned host memory.
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "launch: wrong number of kernel arguments");
#ifdef EMU_BUILD
    (void)::emu::launch(kernel, grid, block, smem, stream, std::forward<A>(args)...);
#else
    kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
#endif
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace llmtrain
