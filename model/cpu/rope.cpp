// model/cpu/rope.cpp — rotary position embedding (Su et al. 2021, RoFormer) in HuggingFace's
// rotate-half convention, forward and backward, in place on the q and k heads of a packed
// [q | k | v] activation. fp32 with the angles' cos and sin from double; OpenMP over positions.
#include <cmath>
#include <vector>

#include "model/cpu/cpu_ops.hpp"

namespace llmtrain {

namespace {

/// cos and sin tables (T, HS/2): angle t * theta^(-2i/HS), computed in double, rounded to fp32.
void rope_tables(std::vector<float>& cs, std::vector<float>& sn, int T, int HS, float theta) {
    const int half = HS / 2;
    cs.resize(static_cast<size_t>(T) * half);
    sn.resize(cs.size());
    for (int i = 0; i < half; ++i) {
        const double inv_freq = std::pow(static_cast<double>(theta), -2.0 * i / HS);
        for (int t = 0; t < T; ++t) {
            const double a = t * inv_freq;
            cs[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(a));
            sn[static_cast<size_t>(t) * half + i] = static_cast<float>(std::sin(a));
        }
    }
}

/// Turns the NH + NKV heads of HS channels at the start of every row of x (B*T rows of
/// (NH + 2 NKV) * HS) by +angle (sign 1) or -angle (sign -1) of position pos[b,t] ((B,T) int32 in
/// [0, n_pos): window positions under context parallelism), or t when pos is null.
void rotate(float* x, const int* pos, int B, int T, int NH, int NKV, int HS, float theta, float sign, int n_pos) {
    std::vector<float> cs, sn;
    rope_tables(cs, sn, pos == nullptr ? T : n_pos, HS, theta);
    const int half = HS / 2, heads = NH + NKV;
    const size_t row = static_cast<size_t>(NH + 2 * NKV) * HS;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; ++bt) {
        const size_t p = pos == nullptr ? static_cast<size_t>(bt % T) : static_cast<size_t>(pos[bt]);
        const float* c = cs.data() + p * half;
        const float* s = sn.data() + p * half;
        float* r = x + static_cast<size_t>(bt) * row;
        for (int h = 0; h < heads; ++h) {  // q heads, then k heads: contiguous
            float* lo = r + static_cast<size_t>(h) * HS;
            float* hi = lo + half;
#pragma omp simd
            for (int i = 0; i < half; ++i) {
                const float a = lo[i], b = hi[i], si = sign * s[i];
                lo[i] = a * c[i] - b * si;
                hi[i] = b * c[i] + a * si;
            }
        }
    }
}

}  // namespace

/// qkv (B,T,(NH + 2 NKV)*HS): q and k heads rotated in place by t * theta^(-2i/HS) (ops.hpp).
void CpuOps::rope_forward(void* qkv, int B, int T, int NH, int NKV, int HS, float theta) {
    rotate(static_cast<float*>(qkv), nullptr, B, T, NH, NKV, HS, theta, 1.0f, T);
}

/// dqkv: the q and k heads' gradients turned back (the rotation's transpose) in place.
void CpuOps::rope_backward(void* dqkv, int B, int T, int NH, int NKV, int HS, float theta) {
    rotate(static_cast<float*>(dqkv), nullptr, B, T, NH, NKV, HS, theta, -1.0f, T);
}

/// qkv: rope_forward at positions pos (B,T) int32 in [0, n_pos) (ops.hpp: reset_position_ids, context parallelism).
void CpuOps::rope_forward_pos(void* qkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                              int n_pos) {
    rotate(static_cast<float*>(qkv), pos, B, T, NH, NKV, HS, theta, 1.0f, n_pos);
}

/// dqkv: rope_backward at positions pos (B,T) int32 in [0, n_pos).
void CpuOps::rope_backward_pos(void* dqkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                               int n_pos) {
    rotate(static_cast<float*>(dqkv), pos, B, T, NH, NKV, HS, theta, -1.0f, n_pos);
}

}  // namespace llmtrain
