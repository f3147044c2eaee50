// tools/bench/bench_cpu.cpp — training throughput of the CPU backend: tokens/s and MFU.
//
// Runs full training steps (zero grads, forward + backward of one micro-batch, global grad norm,
// clipping, AdamW) of the tiny GPT (4 layers, 4 heads, width 256, seq_len 256, vocab 8192) at
// micro_batch_size 16 on random tokens, after warmup steps, and prints the mean time per phase.
// MFU = flops_per_token (6 N_params + 6 n_layer T C) * tokens/s / peak, where the peak is the
// backend's own sgemm rate at 2048^3 (all threads), measured here unless --peak-gflops is given.
// It also prints tokens per CPU-second (all threads), which a loaded machine disturbs far less.
//
// Usage: bench_cpu [--steps N] [--warmup N] [--batch B] [--ratio R] [--peak-gflops G]
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/backend.hpp"
#include "model/cpu/blas_setup.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_clip.hpp"

using namespace llmtrain;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Best-of-3 rate of the backend's matmul_forward at N = C = OC = 2048 (2 * 2048^3 FLOP), in FLOP/s.
double measure_sgemm_peak(Ops& ops) {
    const int n = 2048;
    const size_t bytes = static_cast<size_t>(n) * n * 4;
    std::vector<float> init(static_cast<size_t>(n) * n, 0.5f);
    void *a = ops.malloc(bytes), *w = ops.malloc(bytes), *out = ops.malloc(bytes);
    ops.memcpy_h2d(a, init.data(), bytes);
    ops.memcpy_h2d(w, init.data(), bytes);
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = Clock::now();
        ops.matmul_forward(out, nullptr, a, w, nullptr, n, n, n);
        ops.synchronize();
        best = std::min(best, seconds_since(t0));
    }
    ops.free(a);
    ops.free(w);
    ops.free(out);
    return 2.0 * n * n * static_cast<double>(n) / best;
}

}  // namespace

int main(int argc, char** argv) {
    int steps = 5, warmup = 2, B = 16;
    float ratio = 0.0f;
    double peak = 0.0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "bench_cpu: %s needs a value\n", a.c_str());
            return 2;
        }
        const char* v = argv[++i];
        if (a == "--steps") steps = std::atoi(v);
        else if (a == "--warmup") warmup = std::atoi(v);
        else if (a == "--batch") B = std::atoi(v);
        else if (a == "--ratio") ratio = static_cast<float>(std::atof(v));
        else if (a == "--peak-gflops") peak = std::atof(v) * 1e9;
        else {
            std::fprintf(stderr, "bench_cpu: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    const GPTConfig cfg{4, 4, 256, 256, 8192};
    const int T = cfg.seq_len, N = B * T;
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions opt;
    opt.B = B;
    opt.T = T;
    opt.checkpoint_ratio = ratio;
    GPT gpt(cfg, opt, alloc);
    gpt.init_params(1337);
    AdamW adamw(alloc, gpt.layout(), AdamWConfig{}, false);
    float* scratch = static_cast<float*>(alloc.alloc(MemCategory::workspace, 4));
    int* d_tok = static_cast<int*>(alloc.alloc(MemCategory::workspace, N * 4));
    int* d_tgt = static_cast<int*>(alloc.alloc(MemCategory::workspace, N * 4));
    std::vector<int> tok(N), tgt(N);
    std::mt19937_64 rng(1);
    for (int i = 0; i < N; ++i) tok[i] = static_cast<int>(rng() % cfg.vocab_size), tgt[i] = static_cast<int>(rng() % cfg.vocab_size);
    ops->memcpy_h2d(d_tok, tok.data(), N * 4);
    ops->memcpy_h2d(d_tgt, tgt.data(), N * 4);
    if (peak <= 0) peak = measure_sgemm_peak(*ops);

    double t_fwd = 0, t_bwd = 0, t_opt = 0, cpu_s = 0;
    for (int s = 0; s < warmup + steps; ++s) {
        const bool timed = s >= warmup;
        const std::clock_t c0 = std::clock();
        auto t0 = Clock::now();
        gpt.zero_grads();
        gpt.forward(d_tok, nullptr, d_tgt, 1.0f / N, true);
        ops->synchronize();
        if (timed) t_fwd += seconds_since(t0);
        t0 = Clock::now();
        gpt.backward(nullptr, nullptr);
        ops->synchronize();
        if (timed) t_bwd += seconds_since(t0);
        t0 = Clock::now();
        const size_t n = gpt.layout().total_numel();
        const float norm = grad_norm(*ops, gpt.grads(), n, scratch);
        adamw.step(gpt.params(), gpt.grads(), 1e-4f, clip_scale(norm, 1.0f));
        ops->synchronize();
        if (timed) t_opt += seconds_since(t0);
        if (timed) cpu_s += static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    }
    const double step_s = (t_fwd + t_bwd + t_opt) / steps;
    const double tok_s = N / step_s;
    const double fpt = flops_per_token(cfg, gpt.layout().num_parameters(), T);
    std::printf("bench_cpu: 4 layers, 4 heads, width 256, seq_len 256, vocab 8192, micro_batch_size %d, "
                "checkpoint ratio %.2f, %d OpenMP threads\n", B, ratio, omp_get_max_threads());
    std::printf("step %.1f ms (forward %.1f, backward %.1f, optimizer %.1f), %d timed steps after %d warmup\n",
                1e3 * step_s, 1e3 * t_fwd / steps, 1e3 * t_bwd / steps, 1e3 * t_opt / steps, steps, warmup);
    std::printf("flops_per_token %.2f MFLOP, peak (sgemm 2048^3) %.1f GFLOP/s, OpenBLAS core %s\n", fpt / 1e6,
                peak / 1e9, cpu::blas_core());
    // CPU seconds of all threads (spin-waiting included): the rate that matters on a shared machine.
    std::printf("cpu-seconds/step %.2f, tokens per cpu-second %.1f\n", cpu_s / steps, N * steps / cpu_s);
    std::printf("tokens/s %.1f MFU %.1f%%\n", tok_s, 100.0 * fpt * tok_s / peak);
    return 0;
}
