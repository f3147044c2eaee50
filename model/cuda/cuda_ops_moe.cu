// model/cuda/cuda_ops_moe.cu — CudaOps's mixture-of-experts ops (model/ops.hpp "Mixture of experts";
// docs/cuda.md "Mixture of experts"): the layer and its three steps each way, from the router and
// dispatch kernels (moe_router.cu, moe_permute.cu) and cuBLASLt for the experts' SwiGLU FFNs.
//
// The same composition as the CPU's (model/cpu/moe_layer.cpp; the math and its sources are
// model/moe.hpp's): router -> plan -> permute -> experts -> combine, and back. The experts' GEMMs
// are one cuBLASLt matmul_forward / matmul_backward per expert and matrix over the expert's row range
// of the grouped rows (not a grouped or batched GEMM: the ranges differ per expert and per step, and
// the per-expert calls reuse the dense layers' tested GEMM path, epilogues and alignment rules); so
// the (E+1) offsets are read to the host first, one stream synchronization per layer and direction.
// The SwiGLU between the GEMMs is swiglu.cu's, once over all kept rows. Activations in the act
// dtype (bf16 or fp32), the router's logits, scores, gates and gradients fp32, as MoeActs says.
#include <stdexcept>
#include <string>
#include <vector>

#include "model/cuda/cuda_ops.hpp"
#include "model/cuda/moe_kernels.cuh"

namespace llmtrain::cuda {

namespace {

/// Throws std::invalid_argument naming `op` unless the shape is one the kernels take (the CPU
/// pieces' checks: N >= 0, C >= 1, 1 <= k <= E, F >= 1, a bias only with the sigmoid score).
void require_moe(const MoeShape& s, const char* op) {
    if (s.N < 0 || s.C < 1 || s.E < 1 || s.k < 1 || s.k > s.E || s.F < 1)
        throw std::invalid_argument(std::string(op) + ": need N >= 0, C >= 1, 1 <= k <= E, F >= 1; got N " +
                                    std::to_string(s.N) + ", C " + std::to_string(s.C) + ", E " + std::to_string(s.E) +
                                    ", k " + std::to_string(s.k) + ", F " + std::to_string(s.F));
    if (s.bias != nullptr && s.score != MoeScore::sigmoid)
        throw std::invalid_argument(std::string(op) + ": a selection bias needs the sigmoid score");
}

char* bytes(void* p) { return static_cast<char*>(p); }
const char* bytes(const void* p) { return static_cast<const char*>(p); }

}  // namespace

float CudaOps::moe_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* out, const void* x,
                           const void* w_router, const void* w13, const void* w2, bool combine) {
    const float aux = moe_dispatch_forward(s, a, w, x, w_router);
    moe_ffn_forward(a.yg, a.gu, a.h, a.xg, w13, w2, a.offsets, s.E, s.C, s.F);
    if (combine) moe_combine_forward(s, a, out, a.yg);
    return aux;
}

void CudaOps::moe_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx, void* dw_router,
                           void* dw13, void* dw2, const void* dout, const void* x, const void* w_router,
                           const void* w13, const void* w2, float aux_scale) {
    moe_combine_backward(s, a, w, w.dyg, dout, a.yg);
    moe_ffn_backward(w.dxg, dw13, dw2, w.dgu, w.dh, w.dyg, a.xg, a.gu, a.h, w13, w2, a.offsets, s.E, s.C, s.F);
    if (s.capacity > 0)  // no expert ran the dropped rows: no gradient to x through them
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::moe_zero_dropped(as<X>(w.dxg), a.offsets, s.E, s.N * s.k, s.C, stream_);
        });
    moe_dispatch_backward(s, a, w, dx, dw_router, w.dxg, x, w_router, aux_scale);
}

float CudaOps::moe_dispatch_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, const void* x,
                                    const void* w_router) {
    require_moe(s, "moe_dispatch_forward");
    const bool sig = s.score == MoeScore::sigmoid;
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::moe_router_logits(w.logits, as<X>(x), as<X>(w_router), s.N, s.C, s.E, stream_);
        cuda::moe_router_select(a.scores, a.ids, a.gates, w.logits, s.bias, s.N, s.E, s.k, sig, stream_);
        cuda::moe_dispatch_plan(w.counts, a.offsets, w.pair_of, a.pos, a.ids, s.N, s.k, s.E, s.capacity, stream_);
        if (s.capacity > 0)  // Switch Transformer's expert capacity: the dropped pairs' outputs stay zero
            cuda::moe_zero_dropped(as<X>(a.yg), a.offsets, s.E, s.N * s.k, s.C, stream_);
        cuda::moe_permute_forward(as<X>(a.xg), as<X>(x), w.pair_of, s.N, s.k, s.C, stream_);
    });
    if (s.aux_coef == 0.0f) return 0.0f;
    double* stats = reinterpret_cast<double*>(scratch_for((2 * static_cast<size_t>(s.E) + 1) * sizeof(double)));
    cuda::moe_aux_stats(stats, a.scores, a.ids, s.N, s.E, s.k, sig, s.aux_coef, stream_);
    double loss = 0.0;  // the caller adds it on the host: wait for it (stream order only)
    CUDA_CHECK(cudaMemcpyAsync(&loss, stats + 2 * s.E, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return static_cast<float>(loss);
}

void CudaOps::moe_ffn_forward(void* yg, void* gu, void* h, const void* xg, const void* w13, const void* w2,
                              const int* offsets, int E, int C, int F) {
    std::vector<int> off(static_cast<size_t>(E) + 1);
    CUDA_CHECK(cudaMemcpyAsync(off.data(), offsets, off.size() * sizeof(int), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const size_t es = dtype_size(act_), F2 = 2 * static_cast<size_t>(F);
    for (int e = 0; e < E; e++) {  // gu rows = xg rows @ w13[e]^T
        const int r0 = off[e], rows = off[e + 1] - off[e];
        if (rows > 0)
            matmul_forward(bytes(gu) + r0 * F2 * es, nullptr, bytes(xg) + size_t(r0) * C * es,
                           bytes(w13) + size_t(e) * F2 * C * es, nullptr, rows, C, static_cast<int>(F2));
    }
    if (off[E] > off[0])  // h = silu(gate) * up over every kept row at once
        swiglu_forward(bytes(h) + size_t(off[0]) * F * es, bytes(gu) + off[0] * F2 * es, off[E] - off[0], F);
    for (int e = 0; e < E; e++) {  // yg rows = h rows @ w2[e]^T
        const int r0 = off[e], rows = off[e + 1] - off[e];
        if (rows > 0)
            matmul_forward(bytes(yg) + size_t(r0) * C * es, nullptr, bytes(h) + size_t(r0) * F * es,
                           bytes(w2) + size_t(e) * C * F * es, nullptr, rows, F, C);
    }
}

void CudaOps::moe_combine_forward(const MoeShape& s, const MoeActs& a, void* out, const void* yg) {
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::moe_combine_forward(as<X>(out), as<X>(yg), a.gates, a.pos, s.N, s.k, s.C, stream_);
    });
}

void CudaOps::moe_combine_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dyg,
                                   const void* dout, const void* yg) {
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::moe_combine_backward(as<X>(dyg), w.dgates, as<X>(dout), as<X>(yg), a.gates, a.pos, s.N, s.k, s.C,
                                   stream_);
    });
}

void CudaOps::moe_ffn_backward(void* dxg, void* dw13, void* dw2, void* dgu, void* dh, const void* dyg,
                               const void* xg, const void* gu, const void* h, const void* w13, const void* w2,
                               const int* offsets, int E, int C, int F) {
    std::vector<int> off(static_cast<size_t>(E) + 1);
    CUDA_CHECK(cudaMemcpyAsync(off.data(), offsets, off.size() * sizeof(int), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const size_t es = dtype_size(act_), F2 = 2 * static_cast<size_t>(F);
    for (int e = 0; e < E; e++) {  // dh = dyg @ w2[e]; dw2[e] += dyg^T @ h
        const size_t r0 = static_cast<size_t>(off[e]);
        const int rows = off[e + 1] - off[e];
        if (rows > 0)
            matmul_backward(bytes(dh) + r0 * F * es, bytes(dw2) + size_t(e) * C * F * es, nullptr,
                            bytes(dyg) + r0 * C * es, bytes(h) + r0 * F * es, bytes(w2) + size_t(e) * C * F * es,
                            nullptr, rows, F, C);
    }
    if (off[E] > off[0])  // dgu = swiglu'(gu) * dh over every kept row at once
        swiglu_backward(bytes(dgu) + off[0] * F2 * es, bytes(dh) + size_t(off[0]) * F * es,
                        bytes(gu) + off[0] * F2 * es, off[E] - off[0], F);
    for (int e = 0; e < E; e++) {  // dxg = dgu @ w13[e]; dw13[e] += dgu^T @ xg
        const size_t r0 = static_cast<size_t>(off[e]);
        const int rows = off[e + 1] - off[e];
        if (rows > 0)
            matmul_backward(bytes(dxg) + r0 * C * es, bytes(dw13) + size_t(e) * F2 * C * es, nullptr,
                            bytes(dgu) + r0 * F2 * es, bytes(xg) + r0 * C * es, bytes(w13) + size_t(e) * F2 * C * es,
                            nullptr, rows, C, static_cast<int>(F2));
    }
}

void CudaOps::moe_dispatch_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx,
                                    void* dw_router, const void* dxg, const void* x, const void* w_router,
                                    float aux_scale) {
    require_moe(s, "moe_dispatch_backward");
    const bool sig = s.score == MoeScore::sigmoid;
    const float* dscores = nullptr;
    if (aux_scale != 0.0f) {  // d(aux_scale * E * sum f_e P_e) / d scores
        double* stats = reinterpret_cast<double*>(scratch_for((2 * static_cast<size_t>(s.E) + 1) * sizeof(double)));
        cuda::moe_aux_stats(stats, a.scores, a.ids, s.N, s.E, s.k, sig, aux_scale, stream_);
        cuda::moe_aux_grad(w.dscores, stats, a.scores, s.N, s.E, sig, aux_scale, stream_);
        dscores = w.dscores;
    }
    cuda::moe_router_dlogits(w.logits, dscores, w.dgates, a.scores, a.ids, s.N, s.E, s.k, sig, stream_);
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::moe_router_dx(as<X>(dx), as<X>(dxg), a.pos, w.logits, as<X>(w_router), s.N, s.k, s.C, s.E, stream_);
        cuda::moe_router_dw(as<X>(dw_router), w.logits, as<X>(x), s.N, s.C, s.E, stream_);
    });
}

}  // namespace llmtrain::cuda
