// model/cpu/blas_setup.cpp — one-time OpenBLAS setup for the CPU backend: single-threaded sgemm and
// the right kernels for this CPU.
//
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels by CPU model when the library loads.
// CPUs newer than the library (e.g. Xeon model 207, Emerald Rapids) fall back to the generic
// "Prescott" SSE3 kernels: sgemm runs ~5x slower (28 instead of ~135 GFLOP/s per core, measured).
// When the user has not chosen with OPENBLAS_CORETYPE, we detect that fallback and redo OpenBLAS's
// dynamic-arch selection with the core that matches the CPU's vector ISA (AVX-512 -> SkylakeX,
// AVX2 -> Haswell), through its exported gotoblas_dynamic_quit/init. Those symbols exist only in
// DYNAMIC_ARCH builds, so they are weak references and the step is skipped without them.
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "model/cpu/blas_setup.hpp"

extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace llmtrain::cpu {

void setup_blas() {
    static std::once_flag once;
    std::call_once(once, [] {
        const bool generic = std::strcmp(openblas_get_corename(), "Prescott") == 0 ||
                             std::strcmp(openblas_get_corename(), "prescott") == 0;
        if (generic && std::getenv("OPENBLAS_CORETYPE") == nullptr && gotoblas_dynamic_init != nullptr &&
            gotoblas_dynamic_quit != nullptr) {
            const char* core = nullptr;
            if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
                core = "SkylakeX";
            else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
                core = "Haswell";
            if (core != nullptr) {
                setenv("OPENBLAS_CORETYPE", core, 0);
                gotoblas_dynamic_quit();
                gotoblas_dynamic_init();
            }
        }
        openblas_set_num_threads(1);  // our OpenMP threads call sgemm on their own slices
    });
}

const char* blas_core() { return openblas_get_corename(); }

}  // namespace llmtrain::cpu
