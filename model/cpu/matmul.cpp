// model/cpu/matmul.cpp — linear layers: out = inp @ weight^T + bias (optional fused GELU) and backward.
//
// Each OpenMP thread calls single-threaded OpenBLAS sgemm on its own slice (rows of N for outputs
// and dinp, rows of OC for dweight), so one thread pool does all the work and the bias/GELU
// epilogues run on data still in cache. OpenBLAS is set to one thread when the backend is created
// (blas_setup.cpp). Results are reproducible for a fixed thread count; another count gives other
// slice sizes, for which OpenBLAS may choose kernels that sum in another order.
#include <cblas.h>

#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/gelu.hpp"
#include "model/cpu/parallel.hpp"

namespace llmtrain {

/// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) (bias may be null). With pre_gelu:
/// pre_gelu (N,OC) = that product and out = gelu_tanh(pre_gelu). fp32. Source: llm.c's matmul with
/// a GELU epilogue (as cuBLASLt's CUBLASLT_EPILOGUE_GELU_AUX_BIAS).
void CpuOps::matmul_forward(void* out, void* pre_gelu, const void* inp, const void* weight,
                            const void* bias, int N, int C, int OC) {
    float* o = static_cast<float*>(out);
    float* pre = static_cast<float*>(pre_gelu);
    const float* x = static_cast<const float*>(inp);
    const float* w = static_cast<const float*>(weight);
    const float* b = static_cast<const float*>(bias);
    float* y = pre ? pre : o;  // where the product lands
#pragma omp parallel
    {
        int n0, n1;
        cpu::thread_range(N, 4, &n0, &n1);
        if (n1 > n0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n1 - n0, OC, C, 1.0f,
                        x + static_cast<size_t>(n0) * C, C, w, C, 0.0f, y + static_cast<size_t>(n0) * OC, OC);
            for (int n = n0; n < n1; ++n) {
                float* yr = y + static_cast<size_t>(n) * OC;
                if (b)
                    for (int j = 0; j < OC; ++j) yr[j] += b[j];
                if (pre) {
                    float* orow = o + static_cast<size_t>(n) * OC;
#pragma omp simd
                    for (int j = 0; j < OC; ++j) orow[j] = cpu::gelu_tanh(yr[j]);
                }
            }
        }
    }
}

/// dinp (N,C) = dout (N,OC) @ weight (OC,C), times gelu_tanh'(pre_gelu (N,C)) when pre_gelu is set;
/// dweight (OC,C) += dout^T @ inp (N,C); dbias (OC) += sum over rows of dout (rows summed in order,
/// so dbias does not depend on the thread count). fp32.
void CpuOps::matmul_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                             const void* inp, const void* weight, const void* pre_gelu, int N, int C,
                             int OC) {
    float* dx = static_cast<float*>(dinp);
    float* dw = static_cast<float*>(dweight);
    float* db = static_cast<float*>(dbias);
    const float* dy = static_cast<const float*>(dout);
    const float* x = static_cast<const float*>(inp);
    const float* w = static_cast<const float*>(weight);
    const float* pre = static_cast<const float*>(pre_gelu);
#pragma omp parallel
    {
        int n0, n1;
        cpu::thread_range(N, 4, &n0, &n1);
        if (n1 > n0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, C, OC, 1.0f,
                        dy + static_cast<size_t>(n0) * OC, OC, w, C, 0.0f, dx + static_cast<size_t>(n0) * C, C);
            if (pre)
                for (int n = n0; n < n1; ++n) {
                    float* dr = dx + static_cast<size_t>(n) * C;
                    const float* pr = pre + static_cast<size_t>(n) * C;
#pragma omp simd
                    for (int c = 0; c < C; ++c) dr[c] *= cpu::gelu_tanh_grad(pr[c]);
                }
        }
        int o0, o1;
        cpu::thread_range(OC, 16, &o0, &o1);
        if (o1 > o0) {
            // dweight rows [o0,o1) = dout[:, o0:o1]^T @ inp: a column slice of dout, leading dim OC.
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, C, N, 1.0f, dy + o0, OC, x, C,
                        1.0f, dw + static_cast<size_t>(o0) * C, C);
            if (db)
                for (int n = 0; n < N; ++n) {
                    const float* dr = dy + static_cast<size_t>(n) * OC;
                    for (int j = o0; j < o1; ++j) db[j] += dr[j];
                }
        }
    }
}

}  // namespace llmtrain
