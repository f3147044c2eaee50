// emu/memory.hpp — the registry of emulated device and pinned host allocations.
//
// Device and pinned memory come from the arena (arena.hpp): each allocation gets its own pages,
// placed at the end of them (256-byte aligned) so that reading past the end soon hits the guard
// page, and is filled with 0xFF (NaN as fp32/bf16) so that a kernel reading memory nobody wrote
// sees NaN instead of a lucky zero. Every allocation is tracked by address range: that tells a
// device pointer from a host pointer at launch time, reports double frees and frees of foreign
// pointers, recognises freed memory (its addresses are never reused) and lists leaks at exit.
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
    uint64_t serial = 0;        ///< 1, 2, ... in allocation order, for messages
    uintptr_t region = 0;       ///< the arena pages holding it (0 for registered host memory)
    size_t region_bytes = 0;
};

/// Allocates `bytes` of `kind` (device or pinned), poisoned with 0xFF. bytes == 0 gives nullptr.
/// Returns cudaErrorMemoryAllocation when the emulated device is full ($CUDA_EMU_DEVICE_MEMORY
/// bytes, default 80 GiB) or the arena cannot map more; records the error with a message.
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

/// Explains why p is not emulated device memory (freed, past an allocation's end, plain host
/// memory), for messages. Also explains device-memory faults (arena.hpp).
std::string explain_foreign(const void* p);

/// Device bytes in use and the emulated capacity, for cudaMemGetInfo.
void device_usage(size_t* used, size_t* total);

/// Frees every allocation (cudaDeviceReset) without reporting leaks.
void release_all();

}  // namespace emu::memory
