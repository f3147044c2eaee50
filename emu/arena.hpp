// emu/arena.hpp — the address range that emulated device and pinned memory come from.
//
// One large reservation (1 TiB of address space, no memory behind it) hands out page-granular
// regions with an inaccessible guard page after each, and never reuses an address. So a pointer is
// device memory exactly when it lies in a live region (host memory can never sit next to it), a
// kernel reading past the end of an allocation or after its cudaFree touches an inaccessible page,
// and the fault handler turns that crash into a report naming the allocation and the thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace emu::arena {

/// A mapped region: [base, base + bytes) readable and writable, followed by a guard page.
struct Region {
    uintptr_t base = 0;
    size_t bytes = 0;
};

/// Maps a new region of at least `bytes` (a multiple of the page size). Returns an empty region
/// when the reservation is exhausted or the kernel refuses the mapping.
Region map(size_t bytes);

/// Makes the region inaccessible again and returns its memory to the system (cudaFree).
void unmap(const Region& r);

/// True when p lies inside the reservation (live, freed or guard: anything but host memory).
bool contains(const void* p);

/// Installs the SIGSEGV/SIGBUS handler that explains faults inside the reservation with
/// `explain(address)` and then terminates the process. Idempotent; faults elsewhere go to the
/// previously installed handler.
void install_fault_handler(std::string (*explain)(const void* address));

}  // namespace emu::arena
