// emu/errors.hpp — the runtime's error state: the per-thread last error and the sticky error.
//
// As in CUDA, an API misuse sets the calling thread's last error (cudaGetLastError reads and clears
// it), while a fault inside a kernel or queued work is sticky: every later runtime call returns it
// until cudaDeviceReset. Each error also carries the emulator's detailed message
// (emu::last_error_message) and is printed to stderr when it happens.
#pragma once
#include <cuda_runtime.h>

namespace emu::errors {

/// The sticky error, or cudaSuccess. Runtime calls return it first.
cudaError_t sticky();

/// Clears the sticky error and this thread's last error (cudaDeviceReset).
void reset();

}  // namespace emu::errors

/// First line of every extern "C" runtime function: a sticky error fails every later call.
#define EMU_RETURN_IF_STICKY()                                          \
    do {                                                                \
        if (cudaError_t sticky_ = ::emu::errors::sticky()) return sticky_; \
    } while (0)
