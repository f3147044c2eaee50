// tools/bench/attention_bench.cpp — forward and backward time of model.attention paths of the CUDA
// backend (native, cublas, cudnn) at one shape, bf16, side by side in one process, for
// tools/bench/gpu_bench.sh.
//
// Usage: attention_bench <path>[,<path>...] B T C NH [iterations (default 20)]
//        [attention_workspace_mb (default model.attention_workspace_mb's)]
// Prints one line per path: shape, mean forward and backward milliseconds over the iterations
// (after 3 warm-up calls; the device is synchronized around each timed loop) and the rate of the
// causal attention FLOPs: forward 2 GEMMs of 2*B*NH*T*T*HS, halved by the causal mask; backward
// counted as 2.5x the forward (FlashAttention-2's convention), whatever each path recomputes. When
// cudnn and another path were both measured, one more line per other path gives its TFLOP/s over
// cuDNN's, forward and backward (issue 22's target for native: >= 0.5 each). A path that is
// unavailable (e.g. cudnn in a build without cuDNN) prints why and is left out; exit 2 on bad
// arguments or when no path ran.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
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

/// Forward and backward seconds per call of one path.
struct Timing {
    double fwd = 0, bwd = 0;
};

Timing time_path(const std::string& path, int B, int T, int C, int NH, int iters, int workspace_mb) {
    llmtrain::CudaBackendOptions opt;
    opt.attention = llmtrain::parse_attention(path);
    if (workspace_mb > 0) opt.attention_workspace_mb = workspace_mb;
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
    Timing t;
    t.fwd = time_per_call(*ops, iters, fwd);
    t.bwd = time_per_call(*ops, iters, bwd);
    for (void* p : {qkv, dout, out, dqkv, static_cast<void*>(lse)}) ops->free(p);
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 6) {
        std::fprintf(stderr, "usage: %s <native|cublas|cudnn>[,...] B T C NH [iterations] [attention_workspace_mb]\n",
                     argv[0]);
        return 2;
    }
    const int B = std::atoi(argv[2]), T = std::atoi(argv[3]), C = std::atoi(argv[4]), NH = std::atoi(argv[5]);
    const int iters = argc > 6 ? std::atoi(argv[6]) : 20, workspace_mb = argc > 7 ? std::atoi(argv[7]) : 0;
    if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0 || iters < 1) {
        std::fprintf(stderr, "attention_bench: need B, T, C, NH >= 1 with NH dividing C, iterations >= 1\n");
        return 2;
    }
    std::vector<std::pair<std::string, Timing>> done;
    const double flops_fwd = 2.0 * 2.0 * B * NH * static_cast<double>(T) * T * (C / NH) / 2.0;
    for (std::string rest = argv[1]; !rest.empty();) {
        const size_t comma = rest.find(',');
        const std::string path = rest.substr(0, comma);
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
        try {
            const Timing t = time_path(path, B, T, C, NH, iters, workspace_mb);
            std::printf("%-7s B=%d T=%d C=%d NH=%d: forward %8.3f ms (%6.1f TFLOP/s), backward %8.3f ms (%6.1f TFLOP/s)\n",
                        path.c_str(), B, T, C, NH, t.fwd * 1e3, flops_fwd / t.fwd / 1e12, t.bwd * 1e3,
                        2.5 * flops_fwd / t.bwd / 1e12);
            done.emplace_back(path, t);
        } catch (const std::exception& e) {
            std::printf("%-7s B=%d T=%d C=%d NH=%d: unavailable: %s\n", path.c_str(), B, T, C, NH, e.what());
        }
    }
    for (const auto& [ref, r] : done)
        if (ref == "cudnn")
            for (const auto& [path, t] : done)
                if (path != ref)  // rates over cuDNN's: the time ratio inverted
                    std::printf("%s / cudnn: forward %.2f, backward %.2f of cuDNN's TFLOP/s\n", path.c_str(),
                                r.fwd / t.fwd, r.bwd / t.bwd);
    return done.empty() ? 2 : 0;
}
