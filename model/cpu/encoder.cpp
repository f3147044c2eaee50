// model/cpu/encoder.cpp — token + position embeddings, forward and backward (GPT-2 input layer).
#include <algorithm>

#include "model/cpu/cpu_ops.hpp"

namespace llmtrain {

/// out (B,T,C) = wte[inp[b,t]] (Vp,C) + wpe[t] (maxT,C); fp32. Token ids must lie in [0, Vp).
void CpuOps::encoder_forward(void* out_, const int* inp, const void* wte_, const void* wpe_, int B,
                             int T, int C) {
    float* out = static_cast<float*>(out_);
    const float* wte = static_cast<const float*>(wte_);
    const float* wpe = static_cast<const float*>(wpe_);
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; ++bt) {
        const float* e = wte + static_cast<size_t>(inp[bt]) * C;
        const float* p = wpe + static_cast<size_t>(bt % T) * C;
        float* o = out + static_cast<size_t>(bt) * C;
        for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
}

/// dwte (Vp,C) += dout (B,T,C) scattered by token; dwpe (maxT,C) += sum over b of dout[b,t].
/// Deterministic without atomics and independent of the thread count: each thread owns a slice of
/// channels and visits the (b,t) rows in order, so every sum has the same order.
void CpuOps::encoder_backward(void* dwte_, void* dwpe_, const void* dout_, const int* inp, int B,
                              int T, int C) {
    float* dwte = static_cast<float*>(dwte_);
    float* dwpe = static_cast<float*>(dwpe_);
    const float* dout = static_cast<const float*>(dout_);
    constexpr int kChunk = 16;  // channels per work item (one AVX-512 vector)
    const int nchunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunks; ++ch) {
        const int c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
        for (int bt = 0; bt < B * T; ++bt) {
            const float* d = dout + static_cast<size_t>(bt) * C;
            float* w = dwte + static_cast<size_t>(inp[bt]) * C;
            float* p = dwpe + static_cast<size_t>(bt % T) * C;
            for (int c = c0; c < c1; ++c) {
                w[c] += d[c];
                p[c] += d[c];
            }
        }
    }
}

}  // namespace llmtrain
