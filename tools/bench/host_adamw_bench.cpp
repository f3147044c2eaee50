// tools/bench/host_adamw_bench.cpp — the host AdamW step (optim/host_adamw.hpp) against this machine's
// memory bandwidth, measured in the same run by a STREAM triad (McCalpin's a[i] = b[i] + s·c[i]) on
// the same OpenMP threads. Both are memory-bound, so the step's GB/s over the triad's says how close
// it runs to the memory roof (#9 asks for >= 80%).
//
// "Bytes moved" counts each array element the loop reads or writes once, the STREAM convention: a
// write to a line not read first (the triad's a, the step's params copy) may cost the hardware a
// second, write-allocate read, and that is not counted on either side. Per element:
//   triad                   12 B: read b, c (8), write a (4)
//   step, bf16 grads/params 28 B: read grad (2) + w, m, v (12); write w, m, v (12) + params (2),
//                                 params rounded to nearest even, or stochastically
//   step, fp32 grads/params 36 B: read grad (4) + w, m, v (12); write w, m, v (12) + params (4)
// Each triad array holds as many bytes as the optimizer state (w, m, v: 12 B per parameter), far
// beyond the caches. The step (each dtype pair and rounding) and the triad run interleaved, `reps`
// times; each reports its best (the machine may be shared).
//
// Usage: host_adamw_bench [millions of parameters, default 64] [reps, default 10]
// Threads: OMP_NUM_THREADS (default: all cores).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "optim/host_adamw.hpp"

using namespace llmtrain;
using Clock = std::chrono::steady_clock;

namespace {

/// The positive number in argv[i], or `fallback` when absent; exits 2 naming the argument otherwise.
double positive_arg(int argc, char** argv, int i, double fallback, const char* what) {
    if (argc <= i) return fallback;
    char* end = nullptr;
    const double x = std::strtod(argv[i], &end);
    if (end == argv[i] || *end != '\0' || !(x > 0)) {
        std::fprintf(stderr, "host_adamw_bench: argument %d '%s': expected a positive number (%s)\n", i, argv[i],
                     what);
        std::exit(2);
    }
    return x;
}

/// n elements set to x, first touched by the threads (static schedule) that will later use them.
template <class T>
std::unique_ptr<T[]> filled(size_t n, T x) {
    std::unique_ptr<T[]> a(new T[n]);
    const long long nn = static_cast<long long>(n);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < nn; ++i) a[i] = x;
    return a;
}

/// Seconds one call of f takes.
template <class F>
double seconds(F&& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    const size_t n = size_t(positive_arg(argc, argv, 1, 64, "millions of parameters") * 1e6);
    const int reps = int(positive_arg(argc, argv, 2, 10, "repetitions"));
    auto w = filled(n, 0.01f), m = filled(n, 0.0f), v = filled(n, 0.0f);
    auto g16 = filled<uint16_t>(n, 0x3c00), p16 = filled<uint16_t>(n, 0);  // bf16 grads: 0.0078125
    auto g32 = filled(n, 0.0078125f), p32 = filled(n, 0.0f);
    const size_t nt = 3 * n;  // triad elements per array: 12 B per parameter, as many bytes as w, m, v
    auto a = filled(nt, 0.0f), b = filled(nt, 1.0f), c = filled(nt, 2.0f);
    const float s = 3.0f;

    double t16 = 1e30, tsr = 1e30, t32 = 1e30, ttriad = 1e30;
    for (int rep = 0; rep < reps; ++rep) {
        const HostAdamWStep st{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, rep + 1};
        HostAdamWStep sr = st;
        sr.stochastic_rounding = true;
        t16 = std::min(t16, seconds([&] {
            host_adamw(w.get(), m.get(), v.get(), g16.get(), DType::bf16, p16.get(), DType::bf16, n, st);
        }));
        tsr = std::min(tsr, seconds([&] {
            host_adamw(w.get(), m.get(), v.get(), g16.get(), DType::bf16, p16.get(), DType::bf16, n, sr);
        }));
        t32 = std::min(t32, seconds([&] {
            host_adamw(w.get(), m.get(), v.get(), g32.get(), DType::f32, p32.get(), DType::f32, n, st);
        }));
        ttriad = std::min(ttriad, seconds([&] {
            const long long nn = static_cast<long long>(nt);
#pragma omp parallel for simd schedule(static)
            for (long long i = 0; i < nn; ++i) a[i] = b[i] + s * c[i];
        }));
    }
    // 1 + 3·2 = 7 exactly: the triad ran over every element (and was not optimized away).
    for (size_t i = 0; i < nt; i += 4093)
        if (a[i] != 7.0f) {
            std::fprintf(stderr, "host_adamw_bench: triad a[%zu] = %g, expected 7\n", i, double(a[i]));
            return 1;
        }

    const double triad_bw = 12.0 * double(nt) / ttriad;
    std::printf("host_adamw_bench: %zu parameters, %d threads, best of %d reps\n", n, omp_get_max_threads(), reps);
    std::printf("triad a = b + 3c, 3 arrays of %.1f MB: %.4f s, %.1f GB/s (12 B per element: read b, c; write a)\n",
                4.0 * double(nt) / 1e6, ttriad, triad_bw / 1e9);
    const struct {
        const char* name;
        double t, bytes;
    } rows[] = {{"bf16 grads/params", t16, 28.0},
                {"bf16 grads/params, stochastic rounding", tsr, 28.0},
                {"fp32 grads/params", t32, 36.0}};
    for (const auto& r : rows)
        std::printf("adamw %s: %.4f s per step, %.4g G params/s, %.1f GB/s (%.0f B per parameter), "
                    "%.0f%% of triad\n",
                    r.name, r.t, double(n) / r.t / 1e9, r.bytes * double(n) / r.t / 1e9, r.bytes,
                    100.0 * r.bytes * double(n) / r.t / triad_bw);
    return 0;
}
