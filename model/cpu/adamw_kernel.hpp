// model/cpu/adamw_kernel.hpp — the host AdamW loop, shared by the CPU backend's Ops::adamw_update and
// the host-offloaded optimizer (optim/host_adamw.hpp), so both apply one formula in one order: the
// per-element arithmetic of model/adamw_math.hpp, which the CUDA kernel applies too.
//
// One pass over memory: read grad, w, m, v; write w, m, v and (optionally) the params copy. The loop
// is OpenMP static over the cores and `omp simd` inside, with the dtype choices made outside the
// loop (templates), so the compiler vectorizes it for the target (AVX-512 or AVX2 with -march=native).
// Files that include it are compiled with -ffp-contract=off (see model/adamw_math.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "model/adamw_math.hpp"
#include "model/bf16.hpp"

namespace llmtrain::cpu {

inline float load(const float* p, size_t i) { return p[i]; }
inline float load(const uint16_t* p, size_t i) { return bf16_to_f32(p[i]); }

/// P for "no params copy": the loop then writes only w, m, v.
struct NoParams {};

/// The update over n elements. G: float or uint16_t (bf16 bits) gradients; P: float or uint16_t
/// params copy written from the updated w, or NoParams. w, m, v: fp32, updated in place. bf16 params
/// round to nearest even, or stochastically when `stochastic`, keyed by flat index index0 + i.
/// No branch inside the loop (it would stop the vectorizer), so the choices are template arguments.
template <bool stochastic, class G, class P>
void adamw_loop(float* w, float* m, float* v, const G* g, P* params, size_t n, const AdamWCoeffs& c,
                size_t index0) {
    const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nn; ++i) {
        const float wi = adamw_element(w[i], m[i], v[i], load(g, size_t(i)), c);
        w[i] = wi;
        if constexpr (std::is_same_v<P, float>) {
            params[i] = wi;
        } else if constexpr (std::is_same_v<P, uint16_t>) {
            if constexpr (stochastic)
                params[i] = bf16_bits_stochastic(wi, rounding_bits(c.seed, index0 + size_t(i)));
            else
                params[i] = f32_to_bf16(wi);
        }
    }
}

}  // namespace llmtrain::cpu
