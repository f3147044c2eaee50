// tests/cuda_emu/memory.hpp — the registry of emulated device and pinned host allocations.
//
// Device memory is host memory handed out by cudaMalloc, 256-byte aligned and filled with 0xFF
// (NaN as fp32/bf16) so that a kernel reading memory nobody wrote sees NaN instead of a lucky zero.
// Every allocation is tracked by address range, which is what lets the emulator tell a device
// pointer from a host pointer at launch time, report double frees and frees of foreign pointers,
// recognise recently freed memory (a quarantine, also poisoned) and list leaks at exit.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace emu::memory {

enum class Kind : uint8_t { device, pinned, registered };

/// One live or recently freed allocation.
struct Allocation {
    uintptr_t base = 0;
    size_t size = 0;
    Kind kind = Kind::device;
    uint64_t serial = 0;  ///< 1, 2, ... in allocation order, for messages
};

/// Allocates `bytes` of `kind` (device or pinned), poisoned with 0xFF. bytes == 0 gives nullptr.
/// Returns cudaErrorMemoryAllocation when the emulated device is full ($CUDA_EMU_DEVICE_MEMORY
/// bytes, default 80 GiB) or the host has no memory; records the error with a message.
cudaError_t allocate(void** p, size_t bytes, Kind kind);

/// Frees an allocation of `kind` (device for cudaFree, pinned for cudaFreeHost) starting at p;
/// nullptr is a no-op. Reports (cudaErrorInvalidValue, recorded) a double free, a pointer into the
/// middle of an allocation, a pointer of the other kind, or a pointer never allocated.
cudaError_t release(void* p, Kind kind);

/// cudaHostRegister / cudaHostUnregister: tracks [p, p+bytes) as pinned without owning it.
cudaError_t register_host(void* p, size_t bytes);
cudaError_t unregister_host(void* p);

/// The live allocation containing p (one-past-the-end counts when `allow_end`), or nullptr.
/// Thread-safe; the pointer stays valid until the allocation is freed.
const Allocation* find(const void* p, bool allow_end = false);

/// "allocation #3 (4096 B device memory at 0x...)": for messages.
std::string describe(const Allocation& a);

/// Explains why p is not emulated device memory (freed, plain host memory, ...), for messages.
std::string explain_foreign(const void* p);

/// Device bytes in use and the emulated capacity, for cudaMemGetInfo.
void device_usage(size_t* used, size_t* total);

/// Frees every allocation (cudaDeviceReset) without reporting leaks.
void release_all();

}  // namespace emu::memory
