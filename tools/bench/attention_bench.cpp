// tools/bench/attention_bench.cpp — forward and backward time of model.attention paths of the CUDA
// backend (native, cublas, cudnn) at one shape, bf16, side by side in one process, and each path's
// outputs against a reference path's, for tools/bench/gpu_bench.sh and tools/gpu/run.sh quick.
//
// Usage: attention_bench <path>[,<path>...] B T C NH [iterations (default 20)]
//        [attention_workspace_mb (default model.attention_workspace_mb's)]
// Prints one line per path: shape, mean forward and backward milliseconds over the iterations
// (after 3 warm-up calls; the device is synchronized around each timed loop) and the rate of the
// causal attention FLOPs: forward 2 GEMMs of 2*B*NH*T*T*HS, halved by the causal mask; backward
// counted as 2.5x the forward (FlashAttention-2's convention), whatever each path recomputes.
// Then, on the same line, the path's error against the reference path (cudnn when it was asked
// for and runs, else cublas when asked for): every path computes one forward (out) and one backward
// (dqkv, with the same fixed dout) on the same seeded bf16 inputs (qkv uniform in [-1, 1), dout in
// [-1, 1)), and the line gives the largest |path - reference| element of out and of dqkv, and that
// maximum over the reference tensor's RMS:
//   native  B=.. T=.. C=.. NH=..: forward .. ms (.. TFLOP/s), backward .. ms (.. TFLOP/s); vs cudnn:
//       out max abs 1.95e-03 = 0.0412 rms, dqkv max abs 2.44e-04 = 0.0187 rms
// (one line; the reference's own line ends "; the reference"; a NaN anywhere prints nan). Both
// sides are bf16 results, so two correct paths differ by their roundings (docs/cuda.md "GPU
// acceptance" names the screen run.sh applies; tests/cuda's derived bound is the fine check).
// When cudnn and another path were both measured, one more line per other path gives its TFLOP/s
// over cuDNN's, forward and backward (issue 22's target for native: >= 0.5 each). A path that is
// unavailable (e.g. cudnn in a build without cuDNN) prints why and is left out; exit 2 on bad
// arguments or when no path ran.
// One pseudo-path besides model.attention's: native-99k, native with its backward forced to the
// small tile, the one a device with 99 KiB of opt-in shared memory per block runs (sm_86/89/120:
// 128 keys x 64 rows at head size 64, 64 keys of 4 warps x 32 rows at 128;
// flash_attention_backward_tiled, model/cuda/flash_attention.hpp), so that it is timed beside the
// large tile an H100/H200 takes, on the same card; its scratch its own (the 5-argument
// flash_attention_backward_scratch_bytes with its keys). Its lines read as native's, labelled
// native-99k.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/bf16.hpp"
#include "model/cuda/cuda_backend.hpp"
#include "model/cuda/flash_attention.hpp"

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

/// n bf16 values of device memory, as bf16 bits (synchronizes).
std::vector<uint16_t> download(Ops& ops, const void* p, size_t n) {
    std::vector<uint16_t> h(n);
    ops.memcpy_d2h(h.data(), p, n * 2);
    ops.synchronize();
    return h;
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

/// One path's forward and backward seconds per call, and its out and dqkv (bf16 bits) of one
/// forward + backward on the seeded inputs.
struct Run {
    double fwd = 0, bwd = 0;
    std::vector<uint16_t> out, dqkv;
};

/// The pseudo-path timing native's backward in the small tile (the file's header).
constexpr const char* kNative99k = "native-99k";

Run run_path(const std::string& path, int B, int T, int C, int NH, int iters, int workspace_mb) {
    const bool small = path == kNative99k;
    llmtrain::CudaBackendOptions opt;
    opt.attention = llmtrain::parse_attention(small ? "native" : path);
    if (workspace_mb > 0) opt.attention_workspace_mb = workspace_mb;
    auto ops = llmtrain::make_cuda_backend("bf16", opt);
    const size_t N = static_cast<size_t>(B) * T;
    void* qkv = bf16_buffer(*ops, N * 3 * C, 1);
    void* dout = bf16_buffer(*ops, N * C, 2);
    void* out = bf16_buffer(*ops, N * C, -1);
    void* dqkv = bf16_buffer(*ops, N * 3 * C, -1);
    auto* lse = static_cast<float*>(ops->malloc(N * NH * sizeof(float)));
    // native-99k's backward: on the default stream, where the backend queues everything else here
    // (no set_stream), with its own scratch.
    const llmtrain::cuda::FlashBackwardTile tile = llmtrain::cuda::flash_backward_tile_small(C / NH);
    float* scratch = small ? static_cast<float*>(ops->malloc(
                                 llmtrain::cuda::flash_attention_backward_scratch_bytes(B, T, C, NH, tile.keys)))
                           : nullptr;
    auto fwd = [&] { ops->attention_forward(out, lse, qkv, B, T, C, NH); };
    auto bwd = [&] {
        if (!small) return ops->attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH);
        using bf16 = __nv_bfloat16;
        llmtrain::cuda::flash_attention_backward_tiled(static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
                                                       static_cast<const bf16*>(qkv), static_cast<const bf16*>(out),
                                                       lse, B, T, C, NH, NH, tile, scratch, nullptr);
    };
    for (int i = 0; i < 3; i++) fwd(), bwd();  // workspaces, plans and cuBLAS heuristics
    Run r;
    r.fwd = time_per_call(*ops, iters, fwd);
    r.bwd = time_per_call(*ops, iters, bwd);
    // The outputs compared: NaN-filled first (0xffff), so an element a path leaves unwritten shows.
    ops->memset(out, 0xff, N * C * 2);
    ops->memset(dqkv, 0xff, N * 3 * C * 2);
    fwd();
    bwd();
    r.out = download(*ops, out, N * C);
    r.dqkv = download(*ops, dqkv, N * 3 * C);
    for (void* p : {qkv, dout, out, dqkv, static_cast<void*>(lse)}) ops->free(p);
    if (scratch) ops->free(scratch);
    return r;
}

/// The largest |got - want| over the elements (NaN when any difference is NaN), and that over
/// want's RMS.
struct Error {
    double max_abs = 0, of_rms = 0;
};

Error error_against(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
    double worst = 0, ss = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); i++) {
        const double w = llmtrain::bf16_to_f32(want[i]), d = std::fabs(double(llmtrain::bf16_to_f32(got[i])) - w);
        ss += w * w;
        if (std::isnan(d) || d > worst) worst = std::isnan(d) || std::isnan(worst) ? NAN : d;
    }
    const double rms = want.empty() ? 0.0 : std::sqrt(ss / double(want.size()));
    return {worst, rms > 0 ? worst / rms : (worst == 0 ? 0.0 : INFINITY)};
}

/// One path's line: its timing, or why it did not run; its errors against the reference.
struct Result {
    std::string path, unavailable;
    double fwd = 0, bwd = 0;
    std::optional<std::pair<Error, Error>> err;  // out, dqkv against the reference
    bool is_reference = false;
};

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
    std::vector<Result> results;
    for (std::string rest = argv[1]; !rest.empty();) {
        const size_t comma = rest.find(',');
        Result r;
        r.path = rest.substr(0, comma);
        results.push_back(r);
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    }
    // The reference runs first (cudnn, else cublas), its outputs kept; every other path is compared
    // as soon as it has run, so at most two paths' outputs are held at once.
    std::vector<size_t> order;
    for (const char* ref : {"cudnn", "cublas"})
        for (size_t i = 0; i < results.size(); i++)
            if (results[i].path == ref) order.push_back(i);
    for (size_t i = 0; i < results.size(); i++)
        if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
    std::optional<Run> ref;
    std::string ref_name;
    for (size_t i : order) {
        Result& res = results[i];
        try {
            Run r = run_path(res.path, B, T, C, NH, iters, workspace_mb);
            res.fwd = r.fwd, res.bwd = r.bwd;
            if (!ref && (res.path == "cudnn" || res.path == "cublas")) {
                res.is_reference = true;
                ref_name = res.path;
                ref = std::move(r);
            } else if (ref) {
                res.err = std::pair{error_against(r.out, ref->out), error_against(r.dqkv, ref->dqkv)};
            }
        } catch (const std::exception& e) {
            res.unavailable = e.what();
        }
    }
    const double flops_fwd = 2.0 * 2.0 * B * NH * static_cast<double>(T) * T * (C / NH) / 2.0;
    const Result* cudnn = nullptr;
    int ran = 0;
    for (const Result& r : results) {
        if (!r.unavailable.empty()) {
            std::printf("%-7s B=%d T=%d C=%d NH=%d: unavailable: %s\n", r.path.c_str(), B, T, C, NH,
                        r.unavailable.c_str());
            continue;
        }
        ran++;
        if (r.path == "cudnn") cudnn = &r;
        std::printf("%-7s B=%d T=%d C=%d NH=%d: forward %8.3f ms (%6.1f TFLOP/s), backward %8.3f ms (%6.1f TFLOP/s)",
                    r.path.c_str(), B, T, C, NH, r.fwd * 1e3, flops_fwd / r.fwd / 1e12, r.bwd * 1e3,
                    2.5 * flops_fwd / r.bwd / 1e12);
        if (r.is_reference) std::printf("; the reference");
        if (r.err)
            std::printf("; vs %s: out max abs %.3e = %.4f rms, dqkv max abs %.3e = %.4f rms", ref_name.c_str(),
                        r.err->first.max_abs, r.err->first.of_rms, r.err->second.max_abs, r.err->second.of_rms);
        std::printf("\n");
    }
    if (cudnn)
        for (const Result& r : results)
            if (&r != cudnn && r.unavailable.empty())  // rates over cuDNN's: the time ratio inverted
                std::printf("%s / cudnn: forward %.2f, backward %.2f of cuDNN's TFLOP/s\n", r.path.c_str(),
                            cudnn->fwd / r.fwd, cudnn->bwd / r.bwd);
    return ran == 0 ? 2 : 0;
}
