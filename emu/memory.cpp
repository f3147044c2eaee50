// emu/memory.cpp — the allocation registry (see memory.hpp): poisoned, range-tracked
// device and pinned host memory from the arena, with double-free detection and a leak report.
#include "emu/memory.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>

#include "emu/arena.hpp"
#include "emu/emu.hpp"

namespace emu::memory {
namespace {

constexpr size_t kAlign = 256;           // cudaMalloc's alignment
constexpr unsigned char kPoison = 0xFF;  // NaN as fp32, bf16 and fp16

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::device: return "device memory";
        case Kind::pinned: return "pinned host memory";
        case Kind::registered: return "registered host memory";
    }
    return "?";
}

struct Registry {
    std::mutex mu;
    std::map<uintptr_t, Allocation> live;   // by base address
    std::map<uintptr_t, Allocation> freed;  // by base address: arena addresses are never reused
    size_t device_bytes = 0;
    uint64_t next_serial = 1;

    /// The allocation of `m` containing p, or nullptr.
    static const Allocation* lookup(const std::map<uintptr_t, Allocation>& m, uintptr_t p, bool allow_end) {
        auto it = m.upper_bound(p);
        if (it == m.begin()) return nullptr;
        --it;
        const Allocation& a = it->second;
        return (p < a.base + a.size || (allow_end && p == a.base + a.size)) ? &a : nullptr;
    }
    /// The allocation of `m` that starts closest below p, or nullptr.
    static const Allocation* below(const std::map<uintptr_t, Allocation>& m, uintptr_t p) {
        auto it = m.upper_bound(p);
        return it == m.begin() ? nullptr : &std::prev(it)->second;
    }
    /// Why p, inside the arena, is not in a live allocation. Call with mu held.
    std::string explain_arena(uintptr_t p) const {
        std::ostringstream s;
        if (const Allocation* f = lookup(freed, p, false)) {
            s << "it points into " << describe(*f) << ", which was freed";
            return s.str();
        }
        const Allocation* a = below(live, p);
        const Allocation* f = below(freed, p);
        if (f && (!a || f->base > a->base)) a = f;
        if (!a) return "it is inside the device arena but before every allocation";
        s << "it is " << (p - (a->base + a->size)) << " B past the end of " << describe(*a)
          << (a == f ? ", which was freed" : "");
        return s.str();
    }
};

std::string explain_fault(const void* p);

// Never destroyed: static destructors of other objects may still free memory at exit.
Registry& reg() {
    static Registry* r = [] {
        arena::install_fault_handler(explain_fault);
        return new Registry;
    }();
    return *r;
}

/// For the fault handler: never blocks (the faulting thread may be interrupted anywhere).
std::string explain_fault(const void* p) {
    Registry& r = reg();
    if (!r.mu.try_lock()) return "(allocation registry busy)";
    std::string s = r.explain_arena(reinterpret_cast<uintptr_t>(p));
    r.mu.unlock();
    return s;
}

/// Emulated device capacity: $CUDA_EMU_DEVICE_MEMORY (bytes, optional K/M/G suffix), default 80 GiB.
bool device_capacity(size_t* bytes) {
    const char* env = std::getenv("CUDA_EMU_DEVICE_MEMORY");
    *bytes = size_t{80} << 30;
    if (!env || !*env) return true;
    char* end = nullptr;
    unsigned long long v = std::strtoull(env, &end, 10);
    size_t mult = 1;
    if (*end == 'K') mult = size_t{1} << 10, ++end;
    else if (*end == 'M') mult = size_t{1} << 20, ++end;
    else if (*end == 'G') mult = size_t{1} << 30, ++end;
    if (end == env || *end != '\0' || v == 0) return false;
    *bytes = static_cast<size_t>(v) * mult;
    return true;
}

/// Prints the allocations still live when the process exits.
struct LeakReport {
    ~LeakReport() {
        Registry& r = reg();
        std::lock_guard lock(r.mu);
        size_t n = 0, bytes = 0;
        std::ostringstream list;
        for (const auto& [base, a] : r.live) {
            if (a.kind == Kind::registered) continue;
            if (n < 10) list << "\n  " << describe(a);
            ++n, bytes += a.size;
        }
        if (n == 0) return;
        std::fprintf(stderr, "cuda_emu: leak report: %zu allocation(s), %zu bytes never freed:%s%s\n", n, bytes,
                     list.str().c_str(), n > 10 ? "\n  ..." : "");
    }
} leak_report_at_exit;

}  // namespace

std::string describe(const Allocation& a) {
    std::ostringstream s;
    s << "allocation #" << a.serial << " (" << a.size << " B " << kind_name(a.kind) << " at 0x" << std::hex << a.base
      << ")";
    return s.str();
}

cudaError_t allocate(void** p, size_t bytes, Kind kind) {
    *p = nullptr;
    if (bytes == 0) return cudaSuccess;
    Registry& r = reg();
    size_t capacity = 0;
    if (!device_capacity(&capacity))
        return record_error(cudaErrorInvalidValue,
                            "CUDA_EMU_DEVICE_MEMORY must be a byte count such as 8589934592 or 8G, got '" +
                                std::string(std::getenv("CUDA_EMU_DEVICE_MEMORY")) + "'");
    const char* fn = kind == Kind::device ? "cudaMalloc(" : "cudaMallocHost(";
    {
        std::lock_guard lock(r.mu);
        if (kind == Kind::device && r.device_bytes + bytes > capacity)
            return record_error(cudaErrorMemoryAllocation,
                                fn + std::to_string(bytes) + " B): out of emulated device memory (" +
                                    std::to_string(r.device_bytes) + " of " + std::to_string(capacity) +
                                    " B in use; set CUDA_EMU_DEVICE_MEMORY)");
    }
    const size_t padded = (bytes + kAlign - 1) / kAlign * kAlign;
    const arena::Region region = arena::map(padded);
    if (!region.base)
        return record_error(cudaErrorMemoryAllocation,
                            fn + std::to_string(bytes) + " B): the emulator's address arena refused the mapping");
    std::memset(reinterpret_cast<void*>(region.base), kPoison, region.bytes);
    // Placed at the end of its pages: an access beyond the 256-byte padding hits the guard page.
    const uintptr_t base = region.base + region.bytes - padded;
    std::lock_guard lock(r.mu);
    r.live[base] = Allocation{base, bytes, kind, r.next_serial++, region.base, region.bytes};
    if (kind == Kind::device) r.device_bytes += bytes;
    *p = reinterpret_cast<void*>(base);
    return cudaSuccess;
}

cudaError_t release(void* p, Kind kind) {
    if (!p) return cudaSuccess;
    Registry& r = reg();
    const char* fn = kind == Kind::device ? "cudaFree" : "cudaFreeHost";
    std::ostringstream msg;
    msg << fn << "(" << p << "): ";
    {
        std::lock_guard lock(r.mu);
        auto u = reinterpret_cast<uintptr_t>(p);
        auto it = r.live.find(u);
        if (it != r.live.end() && it->second.kind == kind) {
            const Allocation a = it->second;
            r.live.erase(it);
            if (kind == Kind::device) r.device_bytes -= a.size;
            arena::unmap({a.region, a.region_bytes});  // later accesses fault and are explained
            r.freed[a.base] = a;
            return cudaSuccess;
        }
        if (it != r.live.end()) msg << "it is " << describe(it->second) << ", not " << kind_name(kind);
        else if (auto f = r.freed.find(u); f != r.freed.end()) msg << "double free of " << describe(f->second);
        else if (const Allocation* a = Registry::lookup(r.live, u, false))
            msg << "it points " << (u - a->base) << " B into " << describe(*a) << ", not at its start";
        else msg << "not a pointer returned by " << (kind == Kind::device ? "cudaMalloc" : "cudaMallocHost");
    }
    return record_error(cudaErrorInvalidValue, msg.str());
}

cudaError_t register_host(void* p, size_t bytes) {
    if (!p || bytes == 0) return record_error(cudaErrorInvalidValue, "cudaHostRegister: null pointer or zero size");
    Registry& r = reg();
    std::lock_guard lock(r.mu);
    auto u = reinterpret_cast<uintptr_t>(p);
    auto next = r.live.lower_bound(u);
    const Allocation* prev = Registry::lookup(r.live, u, false);
    if (prev || (next != r.live.end() && next->first < u + bytes)) {
        std::ostringstream m;
        m << "cudaHostRegister(" << p << ", " << bytes << "): overlaps " << describe(prev ? *prev : next->second);
        return record_error(cudaErrorHostMemoryAlreadyRegistered, m.str());
    }
    r.live[u] = Allocation{u, bytes, Kind::registered, r.next_serial++};
    return cudaSuccess;
}

cudaError_t unregister_host(void* p) {
    Registry& r = reg();
    std::lock_guard lock(r.mu);
    auto it = r.live.find(reinterpret_cast<uintptr_t>(p));
    if (it == r.live.end() || it->second.kind != Kind::registered) {
        std::ostringstream m;
        m << "cudaHostUnregister(" << p << "): not the start of a cudaHostRegister range";
        return record_error(cudaErrorHostMemoryNotRegistered, m.str());
    }
    r.live.erase(it);
    return cudaSuccess;
}

const Allocation* find(const void* p, bool allow_end) {
    Registry& r = reg();
    std::lock_guard lock(r.mu);
    return Registry::lookup(r.live, reinterpret_cast<uintptr_t>(p), allow_end);
}

std::string explain_foreign(const void* p) {
    if (!arena::contains(p))
        return "it is not inside any emulated device or pinned host allocation (a plain host pointer? use "
               "cudaMalloc, cudaMallocHost or cudaHostRegister)";
    Registry& r = reg();
    std::lock_guard lock(r.mu);
    return r.explain_arena(reinterpret_cast<uintptr_t>(p));
}

void device_usage(size_t* used, size_t* total) {
    Registry& r = reg();
    if (!device_capacity(total)) *total = size_t{80} << 30;
    std::lock_guard lock(r.mu);
    *used = r.device_bytes;
}

void release_all() {
    Registry& r = reg();
    std::lock_guard lock(r.mu);
    for (auto& [base, a] : r.live) {
        if (a.kind == Kind::registered) continue;
        arena::unmap({a.region, a.region_bytes});
        r.freed[base] = a;
    }
    r.live.clear();
    r.device_bytes = 0;
}

}  // namespace emu::memory

namespace emu {

void check_device_range(const void* p, size_t bytes, const char* what) {
    if (bytes == 0) return;
    const memory::Allocation* a = memory::find(p);
    std::ostringstream m;
    if (!a) {
        m << what << ": " << p << " (" << bytes << " B) is not emulated device memory: " << memory::explain_foreign(p);
        throw Error(m.str());
    }
    auto u = reinterpret_cast<uintptr_t>(p);
    if (u + bytes > a->base + a->size) {
        m << what << ": [" << p << ", +" << bytes << " B) runs " << (u + bytes - (a->base + a->size))
          << " B past the end of " << memory::describe(*a);
        throw Error(m.str());
    }
}

bool is_device_accessible(const void* p) { return memory::find(p, true) != nullptr; }

bool is_device_memory(const void* p) {
    const memory::Allocation* a = memory::find(p, true);
    return a && a->kind == memory::Kind::device;
}

void poison_host(void* p, size_t bytes) {
    if (bytes) std::memset(p, 0xFF, bytes);
}

MemoryStats memory_stats() {
    memory::Registry& r = memory::reg();
    std::lock_guard lock(r.mu);
    MemoryStats s;
    for (const auto& [base, a] : r.live) {
        if (a.kind == memory::Kind::device) ++s.device_allocations, s.device_bytes += a.size;
        else if (a.kind == memory::Kind::pinned) ++s.pinned_allocations, s.pinned_bytes += a.size;
    }
    return s;
}

}  // namespace emu
