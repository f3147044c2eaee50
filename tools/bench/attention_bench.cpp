// tools/bench/attention_bench.cpp — forward and backward time of one model.attention path of the
// CUDA backend (native, cublas or cudnn) at one shape, bf16, for tools/bench/gpu_bench.sh.
//
// Usage: attention_bench <native|cublas|cudnn> B T C NH [iterations (default 20)]
//        [attention_workspace_mb (default model.attention_workspace_mb's)]
// Prints one line: path, shape, mean forward and backward milliseconds over the iterations (after 3
// warm-up calls; the device is synchronized around each timed loop) and the rate of the causal
// attention FLOPs: forward 2 GEMMs of 2*B*NH*T*T*HS, halved by the causal mask; backward counted as
// 2.5x the forward (FlashAttention-2's convention), whatever each path recomputes. Exit 2 on bad
// arguments or when the path is unavailable (e.g. cudnn in a build without cuDNN).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "model/bf16.hpp"
#include "model/cuda/cuda_backend.hpp"

namespace {

using llmtrain::Ops;

/// A device buffer of n bf16 values uniform in [-1, 1) (seeded), or uninitialized when seed < 0.
void* bf16_buffer(Ops& ops, size_t n, int seed) {
    void* p = ops.malloc(n * 2);
    if (seed < 0) return p;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<uint16_t> h(n);
    for (auto& x : h) x = llmtrain::f32_to_bf16(d(rng));
    ops.memcpy_h2d(p, h.data(), n * 2);
    ops.synchronize();
    return p;
}

/// Mean seconds of f() over `iters` calls, the device synchronized before and after.
template <class F>
double time_per_call(Ops& ops, int iters, F&& f) {
    ops.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++) f();
    ops.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 6) {
        std::fprintf(stderr, "usage: %s <native|cublas|cudnn> B T C NH [iterations] [attention_workspace_mb]\n", argv[0]);
        return 2;
    }
    try {
        llmtrain::CudaBackendOptions opt;
        opt.attention = llmtrain::parse_attention(argv[1]);
        const int B = std::atoi(argv[2]), T = std::atoi(argv[3]), C = std::atoi(argv[4]), NH = std::atoi(argv[5]);
        const int iters = argc > 6 ? std::atoi(argv[6]) : 20;
        if (argc > 7) opt.attention_workspace_mb = std::atoi(argv[7]);
        if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0 || iters < 1) {
            std::fprintf(stderr, "attention_bench: need B, T, C, NH >= 1 with NH dividing C, iterations >= 1\n");
            return 2;
        }
        auto ops = llmtrain::make_cuda_backend("bf16", opt);
        const size_t N = static_cast<size_t>(B) * T;
        void* qkv = bf16_buffer(*ops, N * 3 * C, 1);
        void* dout = bf16_buffer(*ops, N * C, 2);
        void* out = bf16_buffer(*ops, N * C, -1);
        void* dqkv = bf16_buffer(*ops, N * 3 * C, -1);
        auto* lse = static_cast<float*>(ops->malloc(N * NH * sizeof(float)));
        auto fwd = [&] { ops->attention_forward(out, lse, qkv, B, T, C, NH); };
        auto bwd = [&] { ops->attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH); };
        for (int i = 0; i < 3; i++) fwd(), bwd();  // workspaces, plans and cuBLAS heuristics
        const double tf = time_per_call(*ops, iters, fwd), tb = time_per_call(*ops, iters, bwd);
        const double flops_fwd = 2.0 * 2.0 * B * NH * static_cast<double>(T) * T * (C / NH) / 2.0;
        std::printf("%-7s B=%d T=%d C=%d NH=%d: forward %8.3f ms (%6.1f TFLOP/s), backward %8.3f ms (%6.1f TFLOP/s)\n",
                    argv[1], B, T, C, NH, tf * 1e3, flops_fwd / tf / 1e12, tb * 1e3, 2.5 * flops_fwd / tb / 1e12);
        for (void* p : {qkv, dout, out, dqkv, static_cast<void*>(lse)}) ops->free(p);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "attention_bench %s: %s\n", argv[1], e.what());
        return 2;
    }
    return 0;
}
