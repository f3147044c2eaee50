// emu/kernel_launch.hpp — emu::launch, the emulator's kernel<<<grid, block, smem, stream>>>.
//
// Converts the arguments to the kernel's parameter types once (by value, as a launch does), checks
// every pointer parameter against the emulated allocations, and queues a closure that runs the
// kernel for one thread on the stream. model/cuda/launch.cuh calls it under EMU_BUILD.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu/emu.hpp"

namespace emu {

/// Queues kernel(args...) over grid x block threads with `smem` bytes of dynamic shared memory on
/// `stream`. Returns the launch error (invalid configuration, too much shared memory, a pointer
/// argument outside emulated device/pinned memory), also recorded as the last error; nothing is
/// queued on error.
template <class... P, class... A>
cudaError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "launch: wrong number of kernel arguments");
    using Params = std::tuple<std::decay_t<P>...>;
    Params params(std::forward<A>(args)...);
    cudaError_t err = cudaSuccess;
    const void* k = reinterpret_cast<const void*>(kernel);
    [&]<size_t... I>(std::index_sequence<I...>) {
        (
            [&] {
                using T = std::tuple_element_t<I, Params>;
                if constexpr (std::is_pointer_v<T>)
                    if (err == cudaSuccess)
                        err = check_kernel_pointer(k, static_cast<int>(I), static_cast<const void*>(std::get<I>(params)));
            }(),
            ...);
    }(std::index_sequence_for<P...>{});
    if (err != cudaSuccess) return err;
    return launch_kernel(k, grid, block, smem, stream, [kernel, params = std::move(params)] { std::apply(kernel, params); });
}

}  // namespace emu

// The runtime's C++ overloads taking a kernel itself, which cuda_runtime.h declares for nvcc only.

/// cudaFuncSetAttribute(kernel, attr, value): forwards to the extern "C" form.
template <class T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}
/// cudaFuncGetAttributes(&attr, kernel): forwards to the extern "C" form.
template <class T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* entry) {
    return ::cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(entry));
}
