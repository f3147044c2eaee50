// model/cpu/encoder.cpp — token + position embeddings, forward and backward (GPT-2 input layer),
// and their vocab-parallel forms for tensor parallelism (a rank holds rows [v0, v0 + nv) of wte;
// docs/distributed.md "Tensor parallelism").
#include <algorithm>
#include <limits>

#include "model/cpu/cpu_ops.hpp"

namespace llmtrain {

/// out (B,T,C) = wte[inp[b,t]] (Vp,C) + wpe[t] (maxT,C); fp32. Token ids must lie in [0, Vp).
/// wpe null: no positions (out = wte[inp]), here and in the three below (dwpe null: none).
/// The vocab-parallel form over the whole table (every id in range).
void CpuOps::encoder_forward(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C) {
    encoder_forward_vocab(out, inp, wte, wpe, B, T, C, 0, std::numeric_limits<int>::max());
}

/// dwte (Vp,C) += dout (B,T,C) scattered by token; dwpe (maxT,C) += sum over b of dout[b,t].
/// The vocab-parallel form over the whole table (every id in range).
void CpuOps::encoder_backward(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C) {
    encoder_backward_vocab(dwte, dwpe, dout, inp, B, T, C, 0, std::numeric_limits<int>::max());
}

/// out (B,T,C) = wte[inp - v0] (nv,C) + wpe[t] where v0 <= inp[b,t] < v0 + nv, else 0 (the whole
/// row, wpe included), so the group's sum has one non-zero term per position. fp32. Source:
/// Megatron-LM's VocabParallelEmbedding (Shoeybi et al. 2019).
void CpuOps::encoder_forward_vocab(void* out, const int* inp, const void* wte, const void* wpe, int B, int T,
                                   int C, int v0, int nv) {
    encoder_forward_pos(out, inp, nullptr, wte, wpe, B, T, C, v0, nv);
}

/// encoder_forward_vocab with the position row pos[b,t] ((B,T) int32 in [0, T); null: t) of wpe.
void CpuOps::encoder_forward_pos(void* out_, const int* inp, const int* pos, const void* wte_, const void* wpe_,
                                 int B, int T, int C, int v0, int nv) {
    float* out = static_cast<float*>(out_);
    const float* wte = static_cast<const float*>(wte_);
    const float* wpe = static_cast<const float*>(wpe_);
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; ++bt) {
        float* o = out + static_cast<size_t>(bt) * C;
        const int id = inp[bt] - v0;
        if (id < 0 || id >= nv) {
            std::fill(o, o + C, 0.0f);
            continue;
        }
        const float* e = wte + static_cast<size_t>(id) * C;
        if (wpe == nullptr) {  // no learned positions (Llama)
            std::copy(e, e + C, o);
            continue;
        }
        const float* p = wpe + static_cast<size_t>(pos == nullptr ? bt % T : pos[bt]) * C;
        for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
}

/// dwte (nv,C) += dout rows of the positions whose token lies in [v0, v0 + nv); dwpe (maxT,C) +=
/// sum over b of dout[b,t] for every position. Deterministic without atomics and independent of the
/// thread count: each thread owns a slice of channels and visits the (b,t) rows in order, so every
/// sum has the same order whatever the range (a slice's rows are bitwise those of the whole table).
void CpuOps::encoder_backward_vocab(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T,
                                    int C, int v0, int nv) {
    encoder_backward_pos(dwte, dwpe, dout, inp, nullptr, B, T, C, v0, nv);
}

/// encoder_backward_vocab with dwpe[pos[b,t]] += dout[b,t] (null pos: t), in the same fixed order.
void CpuOps::encoder_backward_pos(void* dwte_, void* dwpe_, const void* dout_, const int* inp, const int* pos,
                                  int B, int T, int C, int v0, int nv) {
    float* dwte = static_cast<float*>(dwte_);
    float* dwpe = static_cast<float*>(dwpe_);
    const float* dout = static_cast<const float*>(dout_);
    constexpr int kChunk = 16;
    const int nchunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunks; ++ch) {
        const int c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
        for (int bt = 0; bt < B * T; ++bt) {
            const float* d = dout + static_cast<size_t>(bt) * C;
            const int id = inp[bt] - v0;
            if (id >= 0 && id < nv) {
                float* w = dwte + static_cast<size_t>(id) * C;
                for (int c = c0; c < c1; ++c) w[c] += d[c];
            }
            if (dwpe == nullptr) continue;  // no learned positions (Llama)
            float* p = dwpe + static_cast<size_t>(pos == nullptr ? bt % T : pos[bt]) * C;
            for (int c = c0; c < c1; ++c) p[c] += d[c];
        }
    }
}

}  // namespace llmtrain
