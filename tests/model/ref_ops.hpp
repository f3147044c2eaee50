// tests/model/ref_ops.hpp — double-precision reference forms of the GPT ops, written as plain loops
// straight from the formulas in model/ops.hpp. The op tests compare the CPU backend's forward
// against these and its backward against central finite differences of these.
#pragma once
#include <cmath>
#include <vector>

namespace llmtrain::test {

using Vec = std::vector<double>;

inline double ref_gelu(double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/// out (N,C) = LN(x) * w + b, eps 1e-5, biased variance.
inline Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int N, int C, Vec* mean = nullptr,
                         Vec* rstd = nullptr) {
    Vec out(x.size());
    for (int n = 0; n < N; ++n) {
        const double* r = &x[static_cast<size_t>(n) * C];
        double m = 0, v = 0;
        for (int c = 0; c < C; ++c) m += r[c];
        m /= C;
        for (int c = 0; c < C; ++c) v += (r[c] - m) * (r[c] - m);
        const double s = 1.0 / std::sqrt(v / C + 1e-5);
        for (int c = 0; c < C; ++c) out[static_cast<size_t>(n) * C + c] = (r[c] - m) * s * w[c] + b[c];
        if (mean) mean->push_back(m);
        if (rstd) rstd->push_back(s);
    }
    return out;
}

/// out (N,OC) = x (N,C) @ w (OC,C)^T + b (OC) (b may be empty), then GELU if gelu.
inline Vec ref_matmul(const Vec& x, const Vec& w, const Vec& b, int N, int C, int OC, bool gelu) {
    Vec out(static_cast<size_t>(N) * OC);
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
            double s = b.empty() ? 0.0 : b[o];
            for (int c = 0; c < C; ++c) s += x[static_cast<size_t>(n) * C + c] * w[static_cast<size_t>(o) * C + c];
            out[static_cast<size_t>(n) * OC + o] = gelu ? ref_gelu(s) : s;
        }
    return out;
}

/// Causal attention: out (B,T,C) from qkv (B,T,3C); lse (B,NH,T) if requested. Materializes
/// each score row in full (the naive textbook form).
inline Vec ref_attention(const Vec& qkv, int B, int T, int C, int NH, Vec* lse = nullptr) {
    const int HS = C / NH;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    Vec out(static_cast<size_t>(B) * T * C, 0.0);
    if (lse) lse->assign(static_cast<size_t>(B) * NH * T, 0.0);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int i = 0; i < T; ++i) {
                auto at = [&](int t, int part, int d) {
                    return qkv[(static_cast<size_t>(b) * T + t) * 3 * C + part * C + h * HS + d];
                };
                Vec s(i + 1);
                double mx = -INFINITY;
                for (int j = 0; j <= i; ++j) {
                    double dot = 0;
                    for (int d = 0; d < HS; ++d) dot += at(i, 0, d) * at(j, 1, d);
                    s[j] = dot * scale;
                    mx = std::max(mx, s[j]);
                }
                double sum = 0;
                for (int j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
                for (int d = 0; d < HS; ++d) {
                    double acc = 0;
                    for (int j = 0; j <= i; ++j) acc += std::exp(s[j] - mx) / sum * at(j, 2, d);
                    out[(static_cast<size_t>(b) * T + i) * C + h * HS + d] = acc;
                }
                if (lse) (*lse)[(static_cast<size_t>(b) * NH + h) * T + i] = mx + std::log(sum);
            }
    return out;
}

/// Cross-entropy per row over the first V of Vp logits.
inline Vec ref_cross_entropy(const Vec& logits, const std::vector<int>& targets, int N, int V, int Vp) {
    Vec loss(N);
    for (int n = 0; n < N; ++n) {
        const double* x = &logits[static_cast<size_t>(n) * Vp];
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; ++j) mx = std::max(mx, x[j]);
        for (int j = 0; j < V; ++j) sum += std::exp(x[j] - mx);
        loss[n] = mx + std::log(sum) - x[targets[n]];
    }
    return loss;
}

}  // namespace llmtrain::test
