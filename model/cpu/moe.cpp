// model/cpu/moe.cpp — the mixture-of-experts pieces of model/moe.hpp on the CPU: router, dispatch
// plan, permute/combine, the experts' SwiGLU FFNs, the auxiliary loss, and their backwards. fp32;
// OpenMP over rows (or over experts), cblas sgemm for the products as in matmul.cpp. Every sum has
// a fixed order, so results do not depend on the thread count except where a router product is
// split by rows over threads (matmul.cpp's rule: a fixed count gives fixed bits).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/cpu/blas_setup.hpp"
#include "model/cpu/parallel.hpp"
#include "model/moe.hpp"

namespace llmtrain {

namespace {

void check_sizes(const char* fn, int N, int C, int E, int k) {
    if (N < 0 || C < 1 || E < 1 || k < 1 || k > E)
        throw std::invalid_argument(std::string(fn) + ": need N >= 0, C >= 1, 1 <= k <= E; got N " +
                                    std::to_string(N) + ", C " + std::to_string(C) + ", E " +
                                    std::to_string(E) + ", k " + std::to_string(k));
}

void check_ids(const char* fn, const int* ids, size_t n, int E) {
    for (size_t i = 0; i < n; ++i)
        if (ids[i] < 0 || ids[i] >= E)
            throw std::invalid_argument(std::string(fn) + ": expert id " + std::to_string(ids[i]) +
                                        " at pair " + std::to_string(i) + " is outside [0, " +
                                        std::to_string(E) + ")");
}

inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/// y (rows, M) = a (rows, K) @ w (M, K)^T, single-threaded sgemm (the caller splits the work).
void gemm_nt(float* y, const float* a, const float* w, int rows, int M, int K, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, M, K, 1.0f, a, K, w, K, beta, y, M);
}

/// y (rows, K) = a (rows, M) @ w (M, K).
void gemm_nn(float* y, const float* a, const float* w, int rows, int M, int K, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, K, M, 1.0f, a, M, w, K, beta, y, K);
}

/// dw (M, K) += a (rows, M)^T @ b (rows, K).
void gemm_tn_acc(float* dw, const float* a, const float* b, int rows, int M, int K) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, K, rows, 1.0f, a, M, b, K, 1.0f, dw, K);
}

}  // namespace

void moe_router_forward(float* logits, float* scores, int* ids, float* gates, const float* x,
                        const float* w_router, const float* bias, int N, int C, int E, int k,
                        const MoeRouterOptions& opt) {
    check_sizes("moe_router_forward", N, C, E, k);
    if (bias && opt.score != MoeScore::sigmoid)
        throw std::invalid_argument("moe_router_forward: a selection bias needs the sigmoid score");
    cpu::setup_blas();
#pragma omp parallel
    {
        int n0, n1;
        cpu::thread_range(N, 4, &n0, &n1);
        if (n1 > n0)
            gemm_nt(logits + size_t(n0) * E, x + size_t(n0) * C, w_router, n1 - n0, E, C, 0.0f);
    }
#pragma omp parallel
    {
        std::vector<float> sel(E);
        std::vector<int> order(E);
#pragma omp for schedule(static)
        for (int n = 0; n < N; ++n) {
            const float* l = logits + size_t(n) * E;
            float* s = scores + size_t(n) * E;
            if (opt.score == MoeScore::softmax) {
                float mx = l[0];
                for (int e = 1; e < E; ++e) mx = std::max(mx, l[e]);
                double sum = 0;
                for (int e = 0; e < E; ++e) sum += (s[e] = std::exp(l[e] - mx));
                const float inv = float(1.0 / sum);
                for (int e = 0; e < E; ++e) s[e] *= inv;
            } else {
                for (int e = 0; e < E; ++e) s[e] = sigmoidf(l[e]);
            }
            for (int e = 0; e < E; ++e) {
                sel[e] = s[e] + (bias ? bias[e] : 0.0f);
                order[e] = e;
            }
            // The k largest selection values, descending; equal values: the lower index first.
            std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
                return sel[a] > sel[b] || (sel[a] == sel[b] && a < b);
            });
            int* id = ids + size_t(n) * k;
            float* g = gates + size_t(n) * k;
            double sum = 0;
            for (int j = 0; j < k; ++j) {
                id[j] = order[j];
                sum += s[order[j]];
            }
            const double norm = opt.norm_topk ? sum : 1.0;  // k = 1, normalized: exactly route_scale
            for (int j = 0; j < k; ++j) g[j] = float(double(opt.route_scale) * s[id[j]] / norm);
        }
    }
}

void moe_aux_grad(float* dscores, const float* scores, const double* f, int N, int E, MoeScore score, float alpha) {
    check_sizes("moe_aux_grad", N, 1, E, 1);
    // d loss / d q[n,e] = alpha E f_e / N; for sigmoid, through q = s / T: (dq - sum(dq q)) / T.
    std::vector<double> dq(E);
    for (int e = 0; e < E; ++e) dq[e] = double(alpha) * E * f[e] / N;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        const float* s = scores + size_t(n) * E;
        float* d = dscores + size_t(n) * E;
        if (score == MoeScore::softmax) {
            for (int e = 0; e < E; ++e) d[e] = float(dq[e]);
        } else {
            double rowsum = 0;
            for (int e = 0; e < E; ++e) rowsum += s[e];
            double dot = 0;
            for (int e = 0; e < E; ++e) dot += dq[e] * s[e] / rowsum;
            for (int e = 0; e < E; ++e) d[e] = float((dq[e] - dot) / rowsum);
        }
    }
}

float moe_aux_loss(float* dscores, const float* scores, const int* ids, int N, int E, int k,
                   MoeScore score, float alpha) {
    check_sizes("moe_aux_loss", N, 1, E, k);
    check_ids("moe_aux_loss", ids, size_t(N) * k, E);
    if (N == 0) return 0.0f;
    std::vector<double> f(E, 0.0), P(E, 0.0);
    for (size_t i = 0; i < size_t(N) * k; ++i) f[ids[i]] += 1.0;
    for (int e = 0; e < E; ++e) f[e] /= double(N) * k;
    // P_e = mean over rows of q[n,e]; q = the scores (softmax) or the scores over their row sum.
    std::vector<double> rowsum(N, 1.0);
    for (int n = 0; n < N; ++n) {
        const float* s = scores + size_t(n) * E;
        if (score == MoeScore::sigmoid) {
            double t = 0;
            for (int e = 0; e < E; ++e) t += s[e];
            rowsum[n] = t;
        }
        for (int e = 0; e < E; ++e) P[e] += s[e] / rowsum[n];
    }
    double loss = 0;
    for (int e = 0; e < E; ++e) loss += f[e] * (P[e] / N);
    loss *= double(alpha) * E;
    if (dscores) moe_aux_grad(dscores, scores, f.data(), N, E, score, alpha);
    return float(loss);
}

void moe_router_backward(float* dx, float* dw_router, float* dlogits, const float* dscores_in,
                         const float* dgates, const float* scores, const int* ids, const float* x,
                         const float* w_router, int N, int C, int E, int k,
                         const MoeRouterOptions& opt) {
    check_sizes("moe_router_backward", N, C, E, k);
    check_ids("moe_router_backward", ids, size_t(N) * k, E);
    cpu::setup_blas();
#pragma omp parallel
    {
        std::vector<double> ds(E);
#pragma omp for schedule(static)
        for (int n = 0; n < N; ++n) {
            const float* s = scores + size_t(n) * E;
            const int* id = ids + size_t(n) * k;
            const float* dg = dgates + size_t(n) * k;
            for (int e = 0; e < E; ++e) ds[e] = dscores_in ? dscores_in[size_t(n) * E + e] : 0.0;
            // gates g_j = scale * r_j / S (S = sum of the selected r) or scale * r_j.
            if (opt.norm_topk) {
                double S = 0, dot = 0;
                for (int j = 0; j < k; ++j) S += s[id[j]];
                for (int j = 0; j < k; ++j) dot += double(dg[j]) * s[id[j]];
                for (int j = 0; j < k; ++j) ds[id[j]] += opt.route_scale * (dg[j] - dot / S) / S;
            } else {
                for (int j = 0; j < k; ++j) ds[id[j]] += double(opt.route_scale) * dg[j];
            }
            float* dl = dlogits + size_t(n) * E;
            if (opt.score == MoeScore::softmax) {
                double dot = 0;
                for (int e = 0; e < E; ++e) dot += double(s[e]) * ds[e];
                for (int e = 0; e < E; ++e) dl[e] = float(s[e] * (ds[e] - dot));
            } else {
                for (int e = 0; e < E; ++e) dl[e] = float(ds[e] * s[e] * (1.0 - s[e]));
            }
        }
    }
    if (N == 0) return;
#pragma omp parallel
    {
        int n0, n1;
        cpu::thread_range(N, 4, &n0, &n1);
        if (n1 > n0)  // dx rows += dlogits rows @ w_router
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, C, E, 1.0f,
                        dlogits + size_t(n0) * E, E, w_router, C, 1.0f, dx + size_t(n0) * C, C);
        int e0, e1;
        cpu::thread_range(E, 1, &e0, &e1);
        if (e1 > e0)  // dw_router rows [e0,e1) += dlogits[:, e0:e1]^T @ x
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, e1 - e0, C, N, 1.0f, dlogits + e0, E,
                        x, C, 1.0f, dw_router + size_t(e0) * C, C);
    }
}

void moe_dispatch_plan(int* counts, int* offsets, int* pair_of, int* pos, const int* ids, int N,
                       int k, int E) {
    check_sizes("moe_dispatch_plan", N, 1, E, k);
    const size_t P = size_t(N) * k;
    check_ids("moe_dispatch_plan", ids, P, E);
    std::fill(counts, counts + E, 0);
    for (size_t i = 0; i < P; ++i) ++counts[ids[i]];
    offsets[0] = 0;
    for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + counts[e];
    std::vector<int> next(offsets, offsets + E);
    for (size_t i = 0; i < P; ++i) {
        const int p = next[ids[i]]++;
        pair_of[p] = int(i);
        pos[i] = p;
    }
}

int moe_dispatch_plan_capped(int* counts, int* offsets, int* pair_of, int* pos, const int* ids, int N, int k,
                             int E, int capacity) {
    check_sizes("moe_dispatch_plan_capped", N, 1, E, k);
    const size_t P = size_t(N) * k;
    check_ids("moe_dispatch_plan_capped", ids, P, E);
    const int cap = capacity <= 0 ? int(P) : capacity;
    std::fill(counts, counts + E, 0);
    for (size_t i = 0; i < P; ++i)  // the first `cap` pairs of each expert, in pair order
        if (counts[ids[i]] < cap) ++counts[ids[i]];
    offsets[0] = 0;
    for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + counts[e];
    std::vector<int> next(offsets, offsets + E);
    int dropped_at = offsets[E];
    for (size_t i = 0; i < P; ++i) {
        const int e = ids[i];
        const int p = next[e] < offsets[e + 1] ? next[e]++ : dropped_at++;
        pair_of[p] = int(i);
        pos[i] = p;
    }
    return int(P) - offsets[E];
}

void moe_permute_forward(float* xg, const float* x, const int* pair_of, int N, int k, int C) {
    const long P = long(N) * k;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < P; ++p)
        std::copy_n(x + size_t(pair_of[p] / k) * C, C, xg + size_t(p) * C);
}

void moe_permute_backward(float* dx, const float* dxg, const int* pos, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        float* d = dx + size_t(n) * C;
        std::copy_n(dxg + size_t(pos[size_t(n) * k]) * C, C, d);
        for (int j = 1; j < k; ++j) {
            const float* g = dxg + size_t(pos[size_t(n) * k + j]) * C;
#pragma omp simd
            for (int c = 0; c < C; ++c) d[c] += g[c];
        }
    }
}

void moe_combine_forward(float* out, const float* yg, const float* gates, const int* pos, int N,
                         int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        float* o = out + size_t(n) * C;
        for (int j = 0; j < k; ++j) {
            const float g = gates[size_t(n) * k + j];
            const float* y = yg + size_t(pos[size_t(n) * k + j]) * C;
#pragma omp simd
            for (int c = 0; c < C; ++c) o[c] += g * y[c];
        }
    }
}

void moe_combine_backward(float* dyg, float* dgates, const float* dout, const float* yg,
                          const float* gates, const int* pos, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        const float* d = dout + size_t(n) * C;
        for (int j = 0; j < k; ++j) {
            const size_t p = size_t(pos[size_t(n) * k + j]);
            const float g = gates[size_t(n) * k + j];
            const float* y = yg + p * C;
            float* dy = dyg + p * C;
            double dot = 0;
            for (int c = 0; c < C; ++c) {
                dy[c] = g * d[c];
                dot += double(d[c]) * y[c];
            }
            dgates[size_t(n) * k + j] = float(dot);
        }
    }
}

void moe_experts_forward(float* yg, float* gu, float* h, const float* xg, const float* w13,
                         const float* w2, const int* offsets, int E, int C, int F) {
    cpu::setup_blas();
#pragma omp parallel for schedule(dynamic, 1)
    for (int e = 0; e < E; ++e) {
        const int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
        if (rows <= 0) continue;
        float* g = gu + size_t(r0) * 2 * F;
        float* hh = h + size_t(r0) * F;
        gemm_nt(g, xg + size_t(r0) * C, w13 + size_t(e) * 2 * F * C, rows, 2 * F, C, 0.0f);
        for (int r = 0; r < rows; ++r) {
            const float* a = g + size_t(r) * 2 * F;  // [gate | up]
            float* o = hh + size_t(r) * F;
            for (int f = 0; f < F; ++f) o[f] = a[f] * sigmoidf(a[f]) * a[F + f];
        }
        gemm_nt(yg + size_t(r0) * C, hh, w2 + size_t(e) * C * F, rows, C, F, 0.0f);
    }
}

void moe_experts_backward(float* dxg, float* dw13, float* dw2, float* dgu, float* dh,
                          const float* dyg, const float* xg, const float* gu, const float* h,
                          const float* w13, const float* w2, const int* offsets, int E, int C, int F) {
    cpu::setup_blas();
#pragma omp parallel for schedule(dynamic, 1)
    for (int e = 0; e < E; ++e) {
        const int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
        if (rows <= 0) continue;
        const float* dy = dyg + size_t(r0) * C;
        const float* W2 = w2 + size_t(e) * C * F;
        const float* W13 = w13 + size_t(e) * 2 * F * C;
        float* dhe = dh + size_t(r0) * F;
        float* dge = dgu + size_t(r0) * 2 * F;
        const float* ge = gu + size_t(r0) * 2 * F;
        gemm_nn(dhe, dy, W2, rows, C, F, 0.0f);                               // dh = dy @ w2
        gemm_tn_acc(dw2 + size_t(e) * C * F, dy, h + size_t(r0) * F, rows, C, F);  // dw2 += dy^T h
        for (int r = 0; r < rows; ++r) {
            const float* a = ge + size_t(r) * 2 * F;
            const float* d = dhe + size_t(r) * F;
            float* o = dge + size_t(r) * 2 * F;
            for (int f = 0; f < F; ++f) {
                const float s = sigmoidf(a[f]);
                o[f] = d[f] * a[F + f] * s * (1.0f + a[f] * (1.0f - s));  // d gate: up * silu'(gate)
                o[F + f] = d[f] * a[f] * s;                                // d up: silu(gate)
            }
        }
        gemm_tn_acc(dw13 + size_t(e) * 2 * F * C, dge, xg + size_t(r0) * C, rows, 2 * F, C);
        gemm_nn(dxg + size_t(r0) * C, dge, W13, rows, 2 * F, C, 0.0f);  // dxg = dgu @ w13
    }
}

}  // namespace llmtrain
