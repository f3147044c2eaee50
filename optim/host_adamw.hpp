// optim/host_adamw.hpp — AdamW on the host for optimizer state offloaded to pinned host memory
// (ZeRO-Offload, Ren et al. 2021; docs/reference.md "Host-offloaded optimizer").
//
// The offload engine (optim/offload.hpp) copies a chunk of gradients device→host, steps it here, and
// copies the params back in the compute dtype. This is the step: fused (one pass over memory: ~28
// bytes per parameter with bf16 grads and params), OpenMP over all cores, vectorized by the compiler
// for the target, by the per-element arithmetic every backend shares (model/adamw_math.hpp), so an
// offloaded step equals an on-device step bit for bit, stochastic rounding included.
#pragma once
#include <cstddef>

#include "model/ops.hpp"

namespace llmtrain {

/// One AdamW step's scalars (Ops::adamw_update's arguments). t >= 1. index0: the first element's index
/// in the flat parameter buffer (keys the stochastic rounding of bf16 params).
struct HostAdamWStep {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int t;
    bool stochastic_rounding = false;
    size_t index0 = 0;
};

/// Updates n elements on the host: fp32 master weights w, moments m and v in place, from grads in
/// grad_t (f32 or bf16); writes the updated weights to params in param_t (f32, or bf16 rounded to
/// nearest even or stochastically) unless params is null. Errors: std::invalid_argument for a u8
/// dtype or t < 1.
void host_adamw(float* w, float* m, float* v, const void* grads, DType grad_t, void* params, DType param_t,
                size_t n, const HostAdamWStep& s);

}  // namespace llmtrain
