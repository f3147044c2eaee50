// model/cpu/matmul_fp8.cpp — FP8 linear layers on the CPU (training.fp8; docs/fp8.md): the numerics
// of the CUDA backend's cuBLASLt FP8 GEMMs, in fp32, as the reference its tests compare against and
// for convergence runs on machines without an FP8 GPU. Not a speed-up: every operand is quantized
// into an fp32 copy that holds the FP8 values exactly, multiplied by OpenBLAS, and the product times
// the inverse scales, as cuBLASLt's D = scale_a[i] * scale_b[j] * sum_k A(i,k) B(k,j) + bias.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/parallel.hpp"

namespace llmtrain {
namespace {

/// Which scales a quantized copy uses: one for the tensor, one per row, one per column.
enum class Axis { tensor, rows, cols };

/// An operand quantized for one product: q (rows*cols floats, x's layout) holds the FP8 values
/// fp8_to_f32(f32_to_fp8(x * s)), inv the inverse scales 1/s (1, rows or cols of them).
struct Quantized {
    std::vector<float> q, inv;
    float inv_at(int r, int c, Axis a) const { return a == Axis::tensor ? inv[0] : a == Axis::rows ? inv[size_t(r)] : inv[size_t(c)]; }
};

/// m = max(m, a) for amax, a NaN sticking (its scale is then 1), as in model/fp8.hpp's fp8_amax.
inline void amax_update(float& m, float a) {
    if (m == m && (a != a || a > m)) m = a;
}

/// x (rows, cols) row-major fp32 quantized to format f with current scales along `axis`
/// (model/fp8.hpp: fp8_scale_from_amax of each group's amax; saturating round to nearest even).
/// The amaxes are maxima, the same whatever the threads' split.
Quantized quantize(const float* x, int rows, int cols, Axis axis, Fp8Format f) {
    Quantized out;
    const long long R = rows, Cc = cols;
    std::vector<float> amax(axis == Axis::cols ? size_t(Cc) : size_t(R), 0.0f);
    if (axis == Axis::cols) {
#pragma omp parallel for schedule(static)
        for (long long c0 = 0; c0 < Cc; c0 += 64)  // blocks of 64 columns, read along the rows
            for (long long r = 0; r < R; ++r)
                for (long long c = c0; c < std::min(Cc, c0 + 64); ++c) amax_update(amax[size_t(c)], std::fabs(x[r * Cc + c]));
    } else {
#pragma omp parallel for schedule(static)
        for (long long r = 0; r < R; ++r)
            for (long long c = 0; c < Cc; ++c) amax_update(amax[size_t(r)], std::fabs(x[r * Cc + c]));
        if (axis == Axis::tensor) {  // the tensor's amax: the max of its rows'
            float m = 0.0f;
            for (float a : amax) amax_update(m, a);
            amax.assign(1, m);
        }
    }
    std::vector<float> scale(amax.size());
    out.inv.resize(amax.size());
    for (size_t i = 0; i < amax.size(); ++i) scale[i] = fp8_scale_from_amax(amax[i], f), out.inv[i] = 1.0f / scale[i];
    out.q.resize(size_t(R * Cc));
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < R; ++r)
        for (long long c = 0; c < Cc; ++c) {
            const float s = scale[axis == Axis::tensor ? 0 : axis == Axis::rows ? size_t(r) : size_t(c)];
            out.q[size_t(r * Cc + c)] = fp8_to_f32(f32_to_fp8(x[r * Cc + c] * s, f, Fp8Saturation::kSatFinite), f);
        }
    return out;
}

/// The scale axis of an operand under recipe r: `rowwise` along its outer dimension, else one scale.
Axis axis_of(Fp8Recipe r, Axis rowwise) { return r == Fp8Recipe::rowwise ? rowwise : Axis::tensor; }

}  // namespace

/// See Ops::matmul_forward_fp8. out (N,OC) = (q4(inp) @ q4(weight)^T) * inv_x[n] * inv_w[oc] + bias.
void CpuOps::matmul_forward_fp8(Fp8Recipe r, void* out, const void* inp, const void* weight, const void* bias, int N,
                                int C, int OC) {
    float* o = static_cast<float*>(out);
    const float* b = static_cast<const float*>(bias);
    const Axis ax = axis_of(r, Axis::rows), aw = axis_of(r, Axis::rows);
    const Quantized x = quantize(static_cast<const float*>(inp), N, C, ax, Fp8Format::kE4M3);
    const Quantized w = quantize(static_cast<const float*>(weight), OC, C, aw, Fp8Format::kE4M3);
    matmul_forward(o, nullptr, x.q.data(), w.q.data(), nullptr, N, C, OC);
#pragma omp parallel for
    for (int n = 0; n < N; ++n)
        for (int j = 0; j < OC; ++j) {
            float& y = o[size_t(n) * OC + j];
            y = y * (x.inv_at(n, 0, ax) * w.inv_at(j, 0, aw)) + (b ? b[j] : 0.0f);
        }
}

/// See Ops::matmul_backward_fp8. dinp = (q5(dout) @ q4(weight)) * inv_d[n] * inv_w[c];
/// dweight += (q5(dout)^T @ q4(inp)) * inv_d[oc] * inv_x[c]; dbias += column sums of dout in row
/// order (as matmul_backward).
void CpuOps::matmul_backward_fp8(Fp8Recipe r, void* dinp, void* dweight, void* dbias, const void* dout,
                                 const void* inp, const void* weight, int N, int C, int OC) {
    float* dx = static_cast<float*>(dinp);
    float* dw = static_cast<float*>(dweight);
    float* db = static_cast<float*>(dbias);
    const float* dy = static_cast<const float*>(dout);
    // dinp's product sums over oc: dout's scales per row n, weight's per column c.
    const Axis ady = axis_of(r, Axis::rows), aw = axis_of(r, Axis::cols);
    // dweight's product sums over n: dout's scales per column oc, inp's per column c.
    const Axis adyc = axis_of(r, Axis::cols), ax = axis_of(r, Axis::cols);
    const Quantized qdy = quantize(dy, N, OC, ady, Fp8Format::kE5M2);
    Quantized qdy_cols;  // rowwise only: tensorwise's one scale serves both products
    if (r == Fp8Recipe::rowwise) qdy_cols = quantize(dy, N, OC, adyc, Fp8Format::kE5M2);
    const Quantized& qdyc = r == Fp8Recipe::rowwise ? qdy_cols : qdy;
    const Quantized qw = quantize(static_cast<const float*>(weight), OC, C, aw, Fp8Format::kE4M3);
    const Quantized qx = quantize(static_cast<const float*>(inp), N, C, ax, Fp8Format::kE4M3);
    std::vector<float> pw(size_t(OC) * C, 0.0f);  // q5(dout)^T @ q4(inp), before its scales
#pragma omp parallel
    {
        int n0, n1;
        cpu::thread_range(N, 4, &n0, &n1);
        if (n1 > n0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, C, OC, 1.0f,
                        qdy.q.data() + size_t(n0) * OC, OC, qw.q.data(), C, 0.0f, dx + size_t(n0) * C, C);
            for (int n = n0; n < n1; ++n)
                for (int c = 0; c < C; ++c) dx[size_t(n) * C + c] *= qdy.inv_at(n, 0, ady) * qw.inv_at(0, c, aw);
        }
        int o0, o1;
        cpu::thread_range(OC, 16, &o0, &o1);
        if (o1 > o0) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, C, N, 1.0f, qdyc.q.data() + o0, OC,
                        qx.q.data(), C, 0.0f, pw.data() + size_t(o0) * C, C);
            for (int o = o0; o < o1; ++o)
                for (int c = 0; c < C; ++c)
                    dw[size_t(o) * C + c] += pw[size_t(o) * C + c] * (qdyc.inv_at(0, o, adyc) * qx.inv_at(0, c, ax));
            if (db)
                for (int n = 0; n < N; ++n)
                    for (int j = o0; j < o1; ++j) db[j] += dy[size_t(n) * OC + j];
        }
    }
}

}  // namespace llmtrain
