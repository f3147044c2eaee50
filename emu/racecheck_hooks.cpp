// emu/racecheck_hooks.cpp — plain loads and stores of emulated kernels, fed to the hazard
// checks (shared_hazards.hpp, global_hazards.hpp): the emulator's racecheck.
//
// Kernel sources compiled with g++'s `-fsanitize=thread --param=tsan-instrument-func-entry-exit=0`
// (and linked WITHOUT -fsanitize=thread: no ThreadSanitizer runtime) call __tsan_readN/__tsan_writeN
// before every load and store. These definitions replace the runtime: an access inside the running
// block's shared memory (dynamic, or static __shared__) is checked for hazards between warps
// (shared_hazards.hpp), one to emulated device memory for hazards between the blocks of its launch
// (global_hazards.hpp); every other access (registers spilled to the fiber's stack, host memory,
// host code) returns at once. Library `cuda_emu_racecheck`, linked through
// llmtrain_cuda_emu_racecheck (model/cuda/emu_racecheck) by tests/cuda's racecheck programs only.
#include <cstddef>

#include "emu/global_hazards.hpp"
#include "emu/shared_hazards.hpp"

namespace {
inline void plain(const void* p, size_t n, bool write, const void* pc) {
    emu::detail::shared_plain_access(p, n, write, pc);
    emu::detail::global_plain_access(p, n, write, pc);
}
}  // namespace

#define LLMTRAIN_RACECHECK_HOOKS(N)                                                                            \
    extern "C" void __tsan_read##N(void* p) { plain(p, N, false, __builtin_return_address(0)); }              \
    extern "C" void __tsan_write##N(void* p) { plain(p, N, true, __builtin_return_address(0)); }              \
    extern "C" void __tsan_unaligned_read##N(void* p) { plain(p, N, false, __builtin_return_address(0)); }    \
    extern "C" void __tsan_unaligned_write##N(void* p) { plain(p, N, true, __builtin_return_address(0)); }
LLMTRAIN_RACECHECK_HOOKS(1)
LLMTRAIN_RACECHECK_HOOKS(2)
LLMTRAIN_RACECHECK_HOOKS(4)
LLMTRAIN_RACECHECK_HOOKS(8)
LLMTRAIN_RACECHECK_HOOKS(16)
#undef LLMTRAIN_RACECHECK_HOOKS

// Atomic operations (device atomics: emu::detail::atomic_update's load and compare-exchange, the
// native integer atomics) are done here, untraced: atomics do not race with each other, and an
// atomic against a plain access to the same word in one launch is not checked. `mo` (the memory
// orders) are ignored: every operation is sequentially consistent.
#define LLMTRAIN_RACECHECK_ATOMICS(N, T)                                                                      \
    extern "C" T __tsan_atomic##N##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    extern "C" void __tsan_atomic##N##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    extern "C" T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                       \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                    \
    }                                                                                                         \
    extern "C" T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) {                                      \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                     \
    }                                                                                                         \
    extern "C" T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) {                                      \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                     \
    }                                                                                                         \
    extern "C" int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {           \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                \
    }                                                                                                         \
    extern "C" int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {             \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                 \
    }
LLMTRAIN_RACECHECK_ATOMICS(16, short)
LLMTRAIN_RACECHECK_ATOMICS(32, int)
LLMTRAIN_RACECHECK_ATOMICS(64, long long)
#undef LLMTRAIN_RACECHECK_ATOMICS

extern "C" {
void __tsan_read_range(void* p, unsigned long n) { plain(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* p, unsigned long n) { plain(p, n, true, __builtin_return_address(0)); }
// The runtime's start-up and C++ hooks the instrumented code may call: nothing to do here.
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
}
