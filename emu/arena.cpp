// emu/arena.cpp — the device address reservation and its fault handler (see arena.hpp).
#include "emu/arena.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "emu/device.hpp"

namespace emu::arena {
namespace {

constexpr size_t kReserve = size_t{1} << 40;  // address space only: MAP_NORESERVE, PROT_NONE

struct Reservation {
    uintptr_t begin = 0, end = 0;
    std::atomic<uintptr_t> next{0};  // bump pointer: addresses are never reused
    size_t page = 4096;
};

Reservation& reservation() {
    static Reservation* r = [] {
        auto* res = new Reservation;
        res->page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        void* p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) {
            res->begin = reinterpret_cast<uintptr_t>(p);
            res->end = res->begin + kReserve;
            res->next = res->begin;
        }
        return res;
    }();
    return *r;
}

std::string (*g_explain)(const void*) = nullptr;
struct sigaction g_previous_segv {}, g_previous_bus {};

/// Reports a fault inside the reservation, then dies; forwards any other fault.
void on_fault(int sig, siginfo_t* info, void* context) {
    if (contains(info->si_addr) && g_explain) {
        // Best effort: the process is about to end, so allocating here is acceptable.
        char addr[32];
        std::snprintf(addr, sizeof addr, "%p", info->si_addr);
        std::string msg = std::string("cuda_emu: illegal address ") + addr + " (device memory): " + g_explain(info->si_addr);
        if (detail::t_thread && detail::t_block) {
            const uint3 t = detail::t_thread->thread_idx, b = detail::t_block->block_idx;
            msg += "; accessed by kernel thread (" + std::to_string(t.x) + "," + std::to_string(t.y) + "," +
                   std::to_string(t.z) + ") of block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
                   std::to_string(b.z) + ")";
        }
        msg += "\n";
        (void)!write(STDERR_FILENO, msg.data(), msg.size());
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    const struct sigaction& prev = sig == SIGSEGV ? g_previous_segv : g_previous_bus;
    if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) prev.sa_sigaction(sig, info, context);
    else if (prev.sa_handler != SIG_IGN && prev.sa_handler != SIG_DFL) prev.sa_handler(sig);
    else signal(sig, SIG_DFL);  // returning re-executes the access: the default action follows
}

}  // namespace

Region map(size_t bytes) {
    Reservation& r = reservation();
    if (!r.begin || bytes == 0) return {};
    const size_t len = (bytes + r.page - 1) / r.page * r.page;
    const uintptr_t base = r.next.fetch_add(len + r.page);  // + one guard page, never mapped
    if (base + len + r.page > r.end) return {};
    if (mprotect(reinterpret_cast<void*>(base), len, PROT_READ | PROT_WRITE) != 0) return {};
    return {base, len};
}

void unmap(const Region& r) {
    void* p = reinterpret_cast<void*>(r.base);
    madvise(p, r.bytes, MADV_DONTNEED);
    mprotect(p, r.bytes, PROT_NONE);
}

bool contains(const void* p) {
    const Reservation& r = reservation();
    const auto u = reinterpret_cast<uintptr_t>(p);
    return u >= r.begin && u < r.end;
}

void install_fault_handler(std::string (*explain)(const void*)) {
    static std::once_flag once;
    std::call_once(once, [explain] {
        g_explain = explain;
        struct sigaction sa {};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_previous_segv);
        sigaction(SIGBUS, &sa, &g_previous_bus);
    });
}

}  // namespace emu::arena
