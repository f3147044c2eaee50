// model/cuda/cuda_ops_moe.cu — CudaOps's mixture-of-experts ops (model/ops.hpp "Mixture of experts";
// docs/cuda.md "Mixture of experts"): the layer and its three steps each way, from the router and
// dispatch kernels (moe_router.cu, moe_permute.cu) and the grouped GEMM (moe_grouped_gemm.cu) for
// the experts' SwiGLU FFNs.
//
// The same composition as the CPU's (model/cpu/moe_layer.cpp; the math and its sources are
// model/moe.hpp's): router -> plan -> permute -> experts -> combine, and back. The experts' GEMMs
// are one grouped launch per matrix and direction, each expert's rows found from the (E+1) offsets
// on the device: the layer (moe_forward / moe_backward, expert parallelism 1) sizes the grids by the
// host bound N*k and never waits for the plan. The separate moe_ffn_forward / moe_ffn_backward,
// which only expert parallelism calls (its all-to-all needs the per-peer counts on the host anyway,
// gpt_moe_ep.cpp), read offsets[E] to the host for the bound. The SwiGLU between the GEMMs is
// swiglu.cu's, once over all the rows. Activations in the act dtype (bf16 or fp32), the router's
// logits, scores, gates and gradients fp32, as MoeActs says.
#include <stdexcept>
#include <string>

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

}  // namespace

float CudaOps::moe_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* out, const void* x,
                           const void* w_router, const void* w13, const void* w2, bool combine) {
    const float aux = moe_dispatch_forward(s, a, w, x, w_router);
    moe_experts_forward(a.yg, a.gu, a.h, a.xg, w13, w2, a.offsets, s.E, s.C, s.F, s.N * s.k, s.capacity > 0);
    if (combine) moe_combine_forward(s, a, out, a.yg);
    return aux;
}

void CudaOps::moe_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx, void* dw_router,
                           void* dw13, void* dw2, const void* dout, const void* x, const void* w_router,
                           const void* w13, const void* w2, float aux_scale) {
    moe_combine_backward(s, a, w, w.dyg, dout, a.yg);
    moe_experts_backward(w.dxg, dw13, dw2, w.dgu, w.dh, w.dyg, a.xg, a.gu, a.h, w13, w2, a.offsets, s.E, s.C, s.F,
                         s.N * s.k, s.capacity > 0);
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

int CudaOps::moe_rows_on_host(const int* offsets, int E) {
    int rows = 0;
    CUDA_CHECK(cudaMemcpyAsync(&rows, offsets + E, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return rows;
}

void CudaOps::moe_ffn_forward(void* yg, void* gu, void* h, const void* xg, const void* w13, const void* w2,
                              const int* offsets, int E, int C, int F) {
    moe_experts_forward(yg, gu, h, xg, w13, w2, offsets, E, C, F, moe_rows_on_host(offsets, E), false);
}

void CudaOps::moe_experts_forward(void* yg, void* gu, void* h, const void* xg, const void* w13, const void* w2,
                                  const int* offsets, int E, int C, int F, int rows, bool zero_past) {
    if (rows <= 0) return;
    dispatch([&](auto t) {
        using X = decltype(t);
        const int F2 = 2 * F;
        cuda::moe_grouped_gemm(cuda::MoeGemm::forward, as<X>(gu), as<X>(xg), as<X>(w13), offsets, E, rows, C, F2,
                               stream_);  // gu rows = xg rows @ w13[e]^T
        if (zero_past) cuda::moe_zero_dropped(as<X>(gu), offsets, E, rows, F2, stream_);
    });
    swiglu_forward(h, gu, rows, F);  // h = silu(gate) * up over every row at once
    dispatch([&](auto t) {
        using X = decltype(t);  // yg rows = h rows @ w2[e]^T
        cuda::moe_grouped_gemm(cuda::MoeGemm::forward, as<X>(yg), as<X>(h), as<X>(w2), offsets, E, rows, F, C,
                               stream_);
    });
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
    moe_experts_backward(dxg, dw13, dw2, dgu, dh, dyg, xg, gu, h, w13, w2, offsets, E, C, F,
                         moe_rows_on_host(offsets, E), false);
}

void CudaOps::moe_experts_backward(void* dxg, void* dw13, void* dw2, void* dgu, void* dh, const void* dyg,
                                   const void* xg, const void* gu, const void* h, const void* w13, const void* w2,
                                   const int* offsets, int E, int C, int F, int rows, bool zero_past) {
    if (rows <= 0) return;
    const int F2 = 2 * F;
    dispatch([&](auto t) {
        using X = decltype(t);  // dh = dyg @ w2[e]; dw2[e] += dyg^T @ h
        cuda::moe_grouped_gemm(cuda::MoeGemm::dinp, as<X>(dh), as<X>(dyg), as<X>(w2), offsets, E, rows, C, F,
                               stream_);
        if (zero_past) cuda::moe_zero_dropped(as<X>(dh), offsets, E, rows, F, stream_);
        cuda::moe_grouped_gemm(cuda::MoeGemm::dweight, as<X>(dw2), as<X>(dyg), as<X>(h), offsets, E, rows, C, F,
                               stream_);
    });
    swiglu_backward(dgu, dh, gu, rows, F);  // dgu = swiglu'(gu) * dh over every row at once
    dispatch([&](auto t) {
        using X = decltype(t);  // dxg = dgu @ w13[e]; dw13[e] += dgu^T @ xg
        cuda::moe_grouped_gemm(cuda::MoeGemm::dinp, as<X>(dxg), as<X>(dgu), as<X>(w13), offsets, E, rows, F2, C,
                               stream_);
        cuda::moe_grouped_gemm(cuda::MoeGemm::dweight, as<X>(dw13), as<X>(dgu), as<X>(xg), offsets, E, rows, F2, C,
                               stream_);
    });
}

void CudaOps::moe_dispatch_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx,
                                    void* dw_router, const void* dxg, const void* x, const void* w_router,
                                    float aux_scale) {
    require_moe(s, "moe_dispatch_backward");
    const bool sig = s.score == MoeScore::sigmoid;
    const float* dscores = nullptr;
    if (aux_scale != 0.0f) {  // d(aux_scale * E * sum f_e P_e) / d scores
        double* stats = reinterpret_cast<double*>(scratch_for((2 * static_cast<size_t>(s.E) + 1) * sizeof(double)));
        if (s.aux_f != nullptr)  // the window's fractions f_e (context parallelism), host doubles: stats[0, E)
            memcpy_h2d(stats, s.aux_f, static_cast<size_t>(s.E) * sizeof(double));
        else
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
