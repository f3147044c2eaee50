// model/cuda/cuda_ops_fp8.cu — CudaOps (cuda_ops.hpp), the FP8 linear layers (training.fp8;
// docs/fp8.md): each call makes its operands' current scales and FP8 copies in the stream's FP8
// workspace (fp8_linear.hpp; fp8_quantize.cu), then runs cuBLASLt's FP8 GEMM on them (matmul.cu
// matmul_fp8), output in the act dtype. Weights and activations are e4m3, output gradients e5m2.
// The contracts are model/ops.hpp's matmul_forward_fp8 / matmul_backward_fp8.

#include <stdexcept>
#include <string>

#include "model/cuda/cuda_ops.hpp"
#include "model/cuda/fp8_linear.hpp"
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {
namespace {

constexpr Fp8Format kE4M3 = Fp8Format::kE4M3, kE5M2 = Fp8Format::kE5M2;

/// Throws std::invalid_argument naming `op` unless N, C and OC are multiples of 16: cuBLASLt's FP8
/// GEMMs sum over each of them in turn (k) and read rows of them (leading dimensions) in 16-byte
/// units.
void require_fp8_shape(int N, int C, int OC, const char* op) {
    if (N % 16 != 0 || C % 16 != 0 || OC % 16 != 0)
        throw std::invalid_argument(std::string("cuda ") + op + ": training.fp8 needs the rows (micro_batch_size x seq_len = " +
                                    std::to_string(N) + ") and the layer's widths (" + std::to_string(C) + " -> " +
                                    std::to_string(OC) + ") to be multiples of 16 (cuBLASLt's FP8 GEMMs)");
}

/// One FP8 copy in the workspace: its bytes and its scales (scales[0, n) then inverses [n, 2n)).
struct Copy {
    uint8_t* q;
    float* scales;
    Fp8Axis axis;
    int n;  ///< scale count: 1, rows or columns of the source
    const float* inv() const { return scales + n; }
};

/// Copy `i` of workspace `ws` at `base` for a source of (R, Cc) scaled along `axis`.
Copy copy_at(char* base, const Fp8Workspace& ws, int i, int R, int Cc, Fp8Axis axis) {
    const int n = axis == Fp8Axis::tensor ? 1 : axis == Fp8Axis::rows ? R : Cc;
    return {reinterpret_cast<uint8_t*>(base + ws.copy[i]), reinterpret_cast<float*>(base + ws.scales[i]), axis, n};
}

}  // namespace

std::string CudaOps::fp8_unsupported(Fp8Recipe r) const {
    const std::string cc = std::to_string(cc_ / 10) + "." + std::to_string(cc_ % 10);
    if (cc_ < 89)
        return "FP8 GEMMs need a GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell); this device is " + cc;
    // cuBLASLt lists its outer-vector scales (one per row and column) for compute capability 9.0 only.
    if (r == Fp8Recipe::rowwise && cc_ != 90)
        return "rowwise scales (cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) need a GPU of compute capability "
               "9.0 (Hopper); this device is " + cc + " (use \"tensorwise\")";
    return "";
}

void CudaOps::matmul_forward_fp8(Fp8Recipe r, void* out, const void* inp, const void* weight, const void* bias, int N,
                                 int C, int OC) {
    require_fp8_shape(N, C, OC, "matmul_forward_fp8");
    const Fp8Workspace ws = fp8_linear_workspace(N, C, OC);
    char* base = static_cast<char*>(grow(fp8_[stream_], ws.bytes));
    const bool rw = r == Fp8Recipe::rowwise;
    const Fp8Axis rows = rw ? Fp8Axis::rows : Fp8Axis::tensor;
    const Copy x = copy_at(base, ws, 0, N, C, rows), w = copy_at(base, ws, 1, OC, C, rows);
    // cuBLASLt's BIAS epilogue with bf16 output; with fp32 output the bias is added after.
    const bool epilogue_bias = bias != nullptr && act_ == DType::bf16;
    dispatch([&](auto t) {
        using X = decltype(t);
        fp8_scales(x.scales, as<X>(inp), N, C, x.axis, kE4M3, stream_);
        fp8_scales(w.scales, as<X>(weight), OC, C, w.axis, kE4M3, stream_);
        fp8_quantize(x.q, as<X>(inp), x.scales, N, C, x.axis, false, kE4M3, stream_);
        fp8_quantize(w.q, as<X>(weight), w.scales, OC, C, w.axis, false, kE4M3, stream_);
        // out (N,OC) row-major is D (OC x N) column-major: m = OC, n = N, k = C; A = weight, B = inp.
        matmul_fp8<X>(lt_, as<X>(out), w.q, kE4M3, w.inv(), x.q, kE4M3, x.inv(), rw, OC, N, C, false,
                      epilogue_bias ? as<X>(bias) : nullptr, stream_);
        if (bias != nullptr && !epilogue_bias) add_bias(as<X>(out), as<X>(bias), N, OC, stream_);
    });
}

void CudaOps::matmul_backward_fp8(Fp8Recipe r, void* dinp, void* dweight, void* dbias, const void* dout,
                                  const void* inp, const void* weight, int N, int C, int OC) {
    require_fp8_shape(N, C, OC, "matmul_backward_fp8");
    float* scratch = dbias != nullptr ? scratch_for(matmul_backward_scratch_bytes(N, OC)) : nullptr;
    const Fp8Workspace ws = fp8_linear_workspace(N, C, OC);
    char* base = static_cast<char*>(grow(fp8_[stream_], ws.bytes));
    const bool rw = r == Fp8Recipe::rowwise;
    const Fp8Axis rows = rw ? Fp8Axis::rows : Fp8Axis::tensor, cols = rw ? Fp8Axis::cols : Fp8Axis::tensor;
    // dinp = dout @ weight sums over oc: dout's scales per row n, weight's per column c (its copy
    // transposed to (C,OC)). dweight = dout^T @ inp sums over n: dout's per column oc and inp's per
    // column c (both copies transposed: (OC,N), (C,N)).
    const Copy dy = copy_at(base, ws, 0, N, OC, rows), wt = copy_at(base, ws, 1, OC, C, cols);
    Copy dyt = copy_at(base, ws, 2, N, OC, cols);
    const Copy xt = copy_at(base, ws, 3, N, C, cols);
    if (!rw) dyt.scales = dy.scales;  // tensorwise: dout's one scale serves both of its copies
    dispatch([&](auto t) {
        using X = decltype(t);
        if (dbias != nullptr) bias_backward(as<X>(dbias), as<X>(dout), N, OC, scratch, stream_);
        fp8_scales(dy.scales, as<X>(dout), N, OC, dy.axis, kE5M2, stream_);
        fp8_scales(wt.scales, as<X>(weight), OC, C, wt.axis, kE4M3, stream_);
        if (rw) fp8_scales(dyt.scales, as<X>(dout), N, OC, dyt.axis, kE5M2, stream_);
        fp8_scales(xt.scales, as<X>(inp), N, C, xt.axis, kE4M3, stream_);
        fp8_quantize(dy.q, as<X>(dout), dy.scales, N, OC, dy.axis, false, kE5M2, stream_);
        fp8_quantize(wt.q, as<X>(weight), wt.scales, OC, C, wt.axis, true, kE4M3, stream_);
        fp8_quantize(dyt.q, as<X>(dout), dyt.scales, N, OC, dyt.axis, true, kE5M2, stream_);
        fp8_quantize(xt.q, as<X>(inp), xt.scales, N, C, xt.axis, true, kE4M3, stream_);
        // dinp (N,C) row-major is D (C x N): m = C, n = N, k = OC; A = weight^T (C,OC), B = dout (N,OC).
        matmul_fp8<X>(lt_, as<X>(dinp), wt.q, kE4M3, wt.inv(), dy.q, kE5M2, dy.inv(), rw, C, N, OC, false, nullptr,
                      stream_);
        // dweight (OC,C) row-major is D (C x OC): m = C, n = OC, k = N; A = inp^T (C,N), B = dout^T (OC,N).
        matmul_fp8<X>(lt_, as<X>(dweight), xt.q, kE4M3, xt.inv(), dyt.q, kE5M2, dyt.inv(), rw, C, OC, N, true,
                      nullptr, stream_);
    });
}

}  // namespace llmtrain::cuda
