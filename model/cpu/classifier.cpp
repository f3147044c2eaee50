// model/cpu/classifier.cpp — fused softmax + cross-entropy over the real vocabulary, with the logit
// gradient written in place (no probability buffer). Source: llm.c's fused_classifier design.
#include <cmath>

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

}  // namespace llmtrain
