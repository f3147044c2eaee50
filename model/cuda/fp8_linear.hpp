// model/cuda/fp8_linear.hpp — the device workspace of one FP8 linear layer call (training.fp8;
// docs/fp8.md), as plain C++ so that the dry run (app/state/model_state.cpp) counts the very bytes the
// CUDA backend (cuda_ops_fp8.cu) takes.
//
// cuBLASLt's FP8 GEMMs on Ada and Hopper take only the "TN" layout (A transposed, B not), so each of
// a linear layer's three products reads operands the model does not store: the forward reads the
// e4m3 copies of inp (N,C) and weight (OC,C); the backward reads dout (N,OC) in e5m2 and weight
// transposed (C,OC) for dinp, and dout transposed (OC,N) and inp transposed (C,N) for dweight. Each
// copy comes with its scales and inverse scales (1, or one per row of the copy). The backward's four
// copies are the largest case; the forward reuses the same buffer.
#pragma once
#include <algorithm>
#include <cstddef>

namespace llmtrain::cuda {

/// The FP8 workspace's pieces for one call at (N, C, OC): byte offsets from its start, each
/// 256-byte aligned. Four copies of max(N*C, N*OC, C*OC) bytes (1 byte per element), each with a
/// float array of 2 * max(N, C, OC) (its scales, then their inverses).
struct Fp8Workspace {
    size_t copy[4];   ///< offsets of the four FP8 copies (1 byte per element)
    size_t scales[4]; ///< offsets of their float scale arrays: [0, dim) scales, [dim, 2 dim) inverses
    size_t bytes;     ///< the whole workspace
    size_t dim;       ///< max(N, C, OC): the longest scale vector
};

/// The workspace layout of an FP8 linear layer call at (N, C, OC) (see the file comment); every
/// copy is sized for the largest of N*C, N*OC, C*OC so the forward and the backward share it.
inline Fp8Workspace fp8_linear_workspace(int N, int C, int OC) {
    auto up = [](size_t b) { return (b + 255) / 256 * 256; };
    Fp8Workspace w{};
    const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
    const size_t copy_bytes = up(std::max({n * c, n * oc, c * oc}));
    w.dim = std::max({n, c, oc});
    const size_t scale_bytes = up(2 * w.dim * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < 4; ++i) w.copy[i] = at, at += copy_bytes;
    for (int i = 0; i < 4; ++i) w.scales[i] = at, at += scale_bytes;
    w.bytes = at;
    return w;
}

}  // namespace llmtrain::cuda
