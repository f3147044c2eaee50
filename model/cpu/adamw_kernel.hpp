// model/cpu/adamw_kernel.hpp — the host AdamW loop, shared by the CPU backend's Ops::adamw_update and
// the host-offloaded optimizer (optim/host_adamw.hpp), so both apply one formula in one order.
//
// AdamW (Loshchilov & Hutter 2019) in PyTorch's order, per element i (fp32 arithmetic):
//   g = grad[i]·grad_scale; m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²;
//   w = w·(1 − lr·wd) − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps),  bc_k = 1 − b_k^t.
// One pass over memory: read grad, w, m, v; write w, m, v and (optionally) the params copy. The loop
// is OpenMP static over the cores and `omp simd` inside, with the dtype choices made outside the
// loop (templates), so the compiler vectorizes it for the target (AVX-512 or AVX2 with -march=native).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace llmtrain::cpu {

/// One step's scalars. t >= 1 is the step count.
struct AdamWScalars {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int t;
};

/// fp32 -> bf16 bits, round to nearest even, written with integer ops the vectorizer accepts.
inline uint16_t bf16_rne(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : r);
}

inline float load(const float* p, size_t i) { return p[i]; }
inline float load(const uint16_t* p, size_t i) {
    const uint32_t u = static_cast<uint32_t>(p[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline void store(float* p, size_t i, float x) { p[i] = x; }
inline void store(uint16_t* p, size_t i, float x) { p[i] = bf16_rne(x); }

/// P for "no params copy": the loop then writes only w, m, v.
struct NoParams {};

/// The update over n elements. G: float or uint16_t (bf16 bits) gradients; P: float or uint16_t
/// params copy written from the updated w, or NoParams. w, m, v: fp32, updated in place. No branch
/// inside the loop (it would stop the vectorizer), so the choices are template arguments.
template <class G, class P>
void adamw_loop(float* w, float* m, float* v, const G* g, P* params, size_t n, const AdamWScalars& s) {
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(s.beta1), s.t));
    const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(s.beta2), s.t)));
    const float step = s.lr / bc1, decay = 1.0f - s.lr * s.weight_decay;
    const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, scale = s.grad_scale;
    const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nn; ++i) {
        const float gi = load(g, size_t(i)) * scale;
        const float mi = b1 * m[i] + (1.0f - b1) * gi;
        const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float wi = w[i] * decay - step * mi / (std::sqrt(vi) / bc2_sqrt + eps);
        w[i] = wi;
        if constexpr (!std::is_same_v<P, NoParams>) store(params, size_t(i), wi);
    }
}

}  // namespace llmtrain::cpu
