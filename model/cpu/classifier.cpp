// model/cpu/classifier.cpp — fused softmax + cross-entropy over the real vocabulary, with the logit
// gradient written in place (no probability buffer). Source: llm.c's fused_classifier design.
// And its vocab-parallel form in two passes (tensor parallelism, docs/distributed.md "Tensor
// parallelism"): per-rank (max, sum of exponentials, target logit), then, after the group gathered
// them, the loss and the gradient of the local columns. Source: Megatron-LM's
// vocab_parallel_cross_entropy (Shoeybi et al. 2019), the max-rescaled sum of the online softmax.
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/vec_math.hpp"

namespace llmtrain {

/// logits (N,Vp) fp32, targets (N) in [0,V), losses (N) = logsumexp(logits[n,:V]) - logits[n,target].
/// With write_grad, logits[n,j] becomes dloss * (softmax_j - [j == target]) for j < V and 0 for
/// padded columns j in [V,Vp); otherwise logits are left unchanged. Parallel over rows.
void CpuOps::fused_classifier(void* logits_, float* losses, const int* targets, int N, int V, int Vp,
                              float dloss, bool write_grad) {
    float* logits = static_cast<float*>(logits_);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        float* x = logits + static_cast<size_t>(n) * Vp;
        const int target = targets[n];
        float mx = x[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < V; ++j) mx = x[j] > mx ? x[j] : mx;  // vectorizes; std::max does not
        const float x_target = x[target];
        float sum = 0.0f;
        if (write_grad) {  // keep e^(x - max) in place for the gradient pass
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < V; ++j) {
                x[j] = cpu::vexp(x[j] - mx);
                sum += x[j];
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < V; ++j) sum += cpu::vexp(x[j] - mx);
        }
        losses[n] = mx + std::log(sum) - x_target;
        if (write_grad) {
            const float s = dloss / sum;
#pragma omp simd
            for (int j = 0; j < V; ++j) x[j] *= s;
            x[target] -= dloss;
            for (int j = V; j < Vp; ++j) x[j] = 0.0f;
        }
    }
}

/// stats (N,3) fp32 from logits (N,nv) fp32, columns [v0, v0 + nv) of the padded vocabulary, of
/// which those below V are valid: per row the max m over valid columns, s = sum exp(x - m) over
/// them, and the target's logit when v0 <= target < v0 + nv (else 0). No valid column: m = -inf,
/// s = 0. Parallel over rows.
void CpuOps::classifier_partial(float* stats, const void* logits_, const int* targets, int N, int nv, int v0,
                                int V) {
    const float* logits = static_cast<const float*>(logits_);
    const int nvalid = std::max(0, std::min(nv, V - v0));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        const float* x = logits + static_cast<size_t>(n) * nv;
        float* st = stats + static_cast<size_t>(n) * 3;
        const int t = targets[n] - v0;
        st[2] = t >= 0 && t < nv ? x[t] : 0.0f;
        if (nvalid == 0) {
            st[0] = -std::numeric_limits<float>::infinity();
            st[1] = 0.0f;
            continue;
        }
        float mx = x[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < nvalid; ++j) mx = x[j] > mx ? x[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < nvalid; ++j) sum += cpu::vexp(x[j] - mx);
        st[0] = mx;
        st[1] = sum;
    }
}

/// losses (N) = M + log S - sum_r t_r from all (tp,N,3) (every rank's stats, rank order), where
/// M = max_r m_r and S = sum_r s_r exp(m_r - M) in rank order (ranks with s_r = 0 add nothing).
/// With write_grad, logits (N,nv) becomes dloss * (exp(x - M) / S - [column == target]) on valid
/// columns and 0 on padding, as fused_classifier. Parallel over rows.
void CpuOps::classifier_finish(void* logits_, float* losses, const float* all, int tp, const int* targets, int N,
                               int nv, int v0, int V, float dloss, bool write_grad) {
    float* logits = static_cast<float*>(logits_);
    const int nvalid = std::max(0, std::min(nv, V - v0));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        float M = -std::numeric_limits<float>::infinity(), tsum = 0.0f;
        for (int r = 0; r < tp; ++r) {
            const float* st = all + (static_cast<size_t>(r) * N + n) * 3;
            M = st[0] > M ? st[0] : M;
            tsum += st[2];
        }
        float S = 0.0f;
        for (int r = 0; r < tp; ++r) {
            const float* st = all + (static_cast<size_t>(r) * N + n) * 3;
            if (st[1] > 0.0f) S += st[1] * cpu::vexp(st[0] - M);
        }
        losses[n] = M + std::log(S) - tsum;
        if (!write_grad) continue;
        float* x = logits + static_cast<size_t>(n) * nv;
        const float s = dloss / S;
#pragma omp simd
        for (int j = 0; j < nvalid; ++j) x[j] = cpu::vexp(x[j] - M) * s;
        for (int j = nvalid; j < nv; ++j) x[j] = 0.0f;
        const int t = targets[n] - v0;
        if (t >= 0 && t < nv) x[t] -= dloss;
    }
}

}  // namespace llmtrain
