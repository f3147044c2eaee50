// tools/bench/host_adamw_bench.cpp — the host AdamW step (optim/host_adamw.hpp) against this machine's
// memory bandwidth, measured in the same run: the step moves ~28 bytes per parameter with bf16 grads
// and params (reads grad 2 + w, m, v 12; writes w, m, v 12 + param 2), so its roof is
// bandwidth / 28 parameters per second. The bandwidth reference is a copy of a buffer as large as the
// state (read + write), on the same threads. Usage: host_adamw_bench [millions of parameters, default 64]
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "optim/host_adamw.hpp"

using namespace llmtrain;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
    const size_t n = size_t(argc > 1 ? std::atof(argv[1]) : 64) * 1000000;
    std::vector<float> w(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
    std::vector<uint16_t> g(n, 0x3c00), p(n);  // bf16 grads (0.0078125) and params
    const size_t copy_floats = 3 * n;           // as many bytes as w, m, v
    std::vector<float> src(copy_floats, 1.0f), dst(copy_floats);
    double best_step = 1e30, best_copy = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = Clock::now();
        host_adamw(w.data(), m.data(), v.data(), g.data(), DType::bf16, p.data(), DType::bf16, n,
                   HostAdamWStep{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, rep + 1});
        best_step = std::min(best_step, std::chrono::duration<double>(Clock::now() - t0).count());
        t0 = Clock::now();
        const long long nn = static_cast<long long>(copy_floats);
#pragma omp parallel for simd schedule(static)
        for (long long i = 0; i < nn; ++i) dst[i] = src[i];
        best_copy = std::min(best_copy, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double step_bw = 28.0 * double(n) / best_step, copy_bw = 2.0 * 4.0 * double(copy_floats) / best_copy;
    std::printf("host AdamW, %zu parameters, %d threads: %.3f s per step = %.2f G params/s, %.1f GB/s moved\n", n,
                omp_get_max_threads(), best_step, double(n) / best_step / 1e9, step_bw / 1e9);
    std::printf("copy of %.1f GB (read + write): %.1f GB/s; host AdamW at %.2fx the copy bandwidth\n",
                4.0 * double(copy_floats) / 1e9, copy_bw / 1e9, step_bw / copy_bw);
    return dst[n / 2] == 1.0f ? 0 : 1;  // keeps the copy from being optimized away
}
