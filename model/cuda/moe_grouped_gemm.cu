// model/cuda/moe_grouped_gemm.cu — the mixture-of-experts' grouped GEMM: every expert's product over
// its own row range of the grouped rows in one launch, the ranges read from the device offsets
// (docs/cuda.md "Mixture of experts"), so the host never waits for the dispatch plan.
//
// Three products (MoeGemm; model/moe.hpp moe_experts_forward / moe_experts_backward), each with fp32
// accumulation and one rounding to T per output element:
//   forward:  out rows r of expert e = a rows r (K) @ b[e] (Nout,K)^T     (x W^T: gu, yg)
//   dinp:     out rows r of expert e = a rows r (K) @ b[e] (K,Nout)       (dY W: dh, dxg)
//   dweight:  out[e] (K,Nout) += sum over e's rows r of a row r^T b row r (dY^T X: dW13, dW2)
// Tile schedule: a block computes a kTileM x kTileN output tile. For forward / dinp, block x is a
// tile of the list "expert 0's ceil(rows_0 / kTileM) row tiles, then expert 1's, ...", found by each
// block scanning the (E+1) offsets (E reads, cached); the grid is launched for the host's bound
// ceil(rows / kTileM) + E >= sum_e ceil(rows_e / kTileM), rows the bound on offsets[E], and the
// surplus blocks return. For dweight, block (x, y, e) owns one tile of expert e's weight gradient
// and loops over e's rows in order, kTileK at a time: no atomics, no second pass, deterministic.
// Operands are staged through shared memory as [row][k] tiles (kLd = kTileK + 8 elements a row: the
// 16-byte rows ldmatrix needs), element by element with bounds checks (any K, Nout, row count or
// alignment; coalesced along whichever of the operand's strides is 1). bf16: 4 warps each own a
// 32x32 sub-tile, ldmatrix.x4 A/B fragments and mma.sync m16n8k16 (mma_fragments.cuh; PTX ISA
// "Matrix Fragments for mma.m16n8k16"). fp32 (the CPU-comparison mode): the same tiles, each thread
// 4x8 outputs on the CUDA cores, sums over k in order. One stage, no cp.async double buffering:
// a first version, not tuned (its speed against cuBLASLt is not measured).
#include <stdexcept>
#include <type_traits>

#include "model/cuda/mma_fragments.cuh"
#include "model/cuda/moe_kernels.cuh"

namespace llmtrain::cuda {

namespace {

constexpr int kTileM = 64, kTileN = 64, kTileK = 32;  ///< the block's output tile and k step
constexpr int kLd = kTileK + 8;                       ///< a staged tile's row length in elements
constexpr int kThreads = 128;                         ///< 4 warps

/// tile[i][kk] (kTileRows x kLd) = src[i * s_row + kk * s_k] for i < rows_left, kk < k_left, else 0,
/// by the block's kThreads threads, each storing a pair kk, kk + 1 (one 4-byte word in bf16: no two
/// lanes store halves of one word); consecutive threads walk the operand's unit stride (s_k == 1:
/// along k, else along i).
template <typename T, int kTileRows>
__device__ inline void stage(T* tile, const T* src, size_t s_row, size_t s_k, int rows_left, int k_left) {
    constexpr int kPairs = kTileRows * kTileK / 2;
    const bool along_k = s_k == 1;
    NO_UNROLL
    for (int idx = static_cast<int>(threadIdx.x); idx < kPairs; idx += kThreads) {
        const int i = along_k ? idx / (kTileK / 2) : idx % kTileRows;
        const int kk = 2 * (along_k ? idx % (kTileK / 2) : idx / kTileRows);
        const T* p = src + i * s_row + kk * s_k;
        const bool row = i < rows_left;
        tile[i * kLd + kk] = row && kk < k_left ? p[0] : from_float<T>(0.0f);
        tile[i * kLd + kk + 1] = row && kk + 1 < k_left ? p[s_k] : from_float<T>(0.0f);
    }
}

/// Where block (blockIdx) works: the expert, the output tile's first row m0 of M, the first column
/// n0, and the operands' first elements and strides (A(m, kk) = a0[m * sam + kk * sak] from m0,
/// B(kk, n) = b0[kk * sbk + n * sbn] from n0, out0[m * ldo + n]); KK the sum's length.
template <typename T>
struct Job {
    const T* a0;
    const T* b0;
    T* out0;
    size_t sam, sak, sbk, sbn;
    int M, KK, ldo;
};

/// The block's job, false for a surplus block (past the schedule) or an expert without rows.
template <typename T>
__device__ inline bool find_job(Job<T>& j, MoeGemm kind, T* out, const T* a, const T* b, const int* offsets, int E,
                                int K, int Nout) {
    const int n0 = static_cast<int>(blockIdx.y) * kTileN;
    int e = -1, t = static_cast<int>(blockIdx.x);
    if (kind == MoeGemm::dweight) {
        e = static_cast<int>(blockIdx.z);
    } else {
        for (int i = 0; i < E; i++) {  // the schedule: expert i's row tiles follow expert i-1's
            const int tiles = (offsets[i + 1] - offsets[i] + kTileM - 1) / kTileM;
            if (t < tiles) {
                e = i;
                break;
            }
            t -= tiles;
        }
        if (e < 0) return false;
    }
    const int r0 = offsets[e], rows = offsets[e + 1] - r0;
    if (rows <= 0) return false;
    const size_t sK = static_cast<size_t>(K), sN = static_cast<size_t>(Nout);
    if (kind == MoeGemm::dweight) {  // out[e] (K,Nout) += a^T b over the rows: M = K, the sum over rows
        const int m0 = t * kTileM;
        j = {a + static_cast<size_t>(r0) * sK + m0, b + static_cast<size_t>(r0) * sN + n0,
             out + (static_cast<size_t>(e) * sK + m0) * sN + n0, 1, sK, sN, 1, K - m0, rows, Nout};
        return true;
    }
    const size_t row0 = static_cast<size_t>(r0) + static_cast<size_t>(t) * kTileM;
    const T* we = b + static_cast<size_t>(e) * sK * sN;
    if (kind == MoeGemm::forward)  // B(kk, n) = W_e[n][kk]
        j = {a + row0 * sK, we + n0 * sK, out + row0 * sN + n0, sK, 1, 1, sK, rows - t * kTileM, K, Nout};
    else  // dinp: B(kk, n) = W_e[kk][n]
        j = {a + row0 * sK, we + n0, out + row0 * sN + n0, sK, 1, sN, 1, rows - t * kTileM, K, Nout};
    return true;
}

/// Writes (or adds, for dweight) the block's fp32 sum v of output (m, n) of the tile, inside M x n_left.
template <typename T>
__device__ inline void put(const Job<T>& j, bool add, int n_left, int m, int n, float v) {
    if (m >= j.M || n >= n_left) return;
    T* p = j.out0 + static_cast<size_t>(m) * j.ldo + n;
    *p = from_float<T>(add ? to_float(*p) + v : v);
}

/// Grid (tiles, ceil(Nout / kTileN), 1) for forward / dinp, (ceil(K / kTileM), ceil(Nout / kTileN), E)
/// for dweight; kThreads threads; 2 kTileM kLd T of dynamic shared memory. See the file comment.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    moe_grouped_gemm_kernel(MoeGemm kind, T* out, const T* a, const T* b, const int* offsets, int E, int K, int Nout) {
    Job<T> j;
    if (!find_job(j, kind, out, a, b, offsets, E, K, Nout)) return;  // uniform over the block
    EXTERN_SHARED(T, smem);
    T* As = smem;                  // [m][kk]
    T* Bs = smem + kTileM * kLd;   // [n][kk]
    const int n_left = Nout - static_cast<int>(blockIdx.y) * kTileN;
    float acc[32];
    for (float& v : acc) v = 0.0f;
    const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
    NO_UNROLL
    for (int k0 = 0; k0 < j.KK; k0 += kTileK) {
        stage<T, kTileM>(As, j.a0 + static_cast<size_t>(k0) * j.sak, j.sam, j.sak, j.M, j.KK - k0);
        stage<T, kTileN>(Bs, j.b0 + static_cast<size_t>(k0) * j.sbk, j.sbn, j.sbk, n_left, j.KK - k0);
        __syncthreads();
        if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // warp (wm, wn): rows 32 wm.., columns 32 wn..
            const int wm = warp / 2, wn = warp % 2;
            for (int ks = 0; ks < kTileK; ks += 16) {
                uint32_t fa[2][4], fb[2][4];
                for (int i = 0; i < 2; i++) load_a(fa[i], As + (wm * 32 + i * 16) * kLd + ks, kLd);
                for (int h = 0; h < 2; h++) load_b_rows(fb[h], Bs + (wn * 32 + h * 16) * kLd + ks, kLd);
                for (int i = 0; i < 2; i++)
                    for (int n8 = 0; n8 < 4; n8++) mma(acc + (i * 4 + n8) * 4, fa[i], fb[n8 / 2] + 2 * (n8 % 2));
            }
        } else {  // thread (tr, tc): rows tr + 16 i, columns tc + 8 c
            const int tr = tid / 8, tc = tid % 8;
            for (int kk = 0; kk < kTileK; kk++)
                for (int i = 0; i < 4; i++) {
                    const float av = As[(tr + 16 * i) * kLd + kk];
                    for (int c = 0; c < 8; c++) acc[i * 8 + c] += av * Bs[(tc + 8 * c) * kLd + kk];
                }
        }
        __syncthreads();
    }
    const bool add = kind == MoeGemm::dweight;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // fragment (i, n8): rows g, g + 8; columns 2t, 2t + 1
        const int wm = warp / 2, wn = warp % 2, g = lane / 4, t = lane % 4;
        for (int i = 0; i < 2; i++)
            for (int n8 = 0; n8 < 4; n8++)
                for (int c = 0; c < 4; c++)
                    put(j, add, n_left, wm * 32 + i * 16 + g + 8 * (c / 2), wn * 32 + n8 * 8 + 2 * t + c % 2,
                        acc[(i * 4 + n8) * 4 + c]);
    } else {
        const int tr = tid / 8, tc = tid % 8;
        for (int i = 0; i < 4; i++)
            for (int c = 0; c < 8; c++) put(j, add, n_left, tr + 16 * i, tc + 8 * c, acc[i * 8 + c]);
    }
}

}  // namespace

template <typename T>
void moe_grouped_gemm(MoeGemm kind, T* out, const T* a, const T* b, const int* offsets, int E, int rows, int K,
                      int Nout, cudaStream_t stream) {
    if (E < 1 || K < 1 || Nout < 1) throw std::invalid_argument("moe_grouped_gemm: need E, K, Nout >= 1");
    if (rows <= 0) return;
    const int n_tiles = ceil_div(Nout, kTileN);
    const dim3 grid = kind == MoeGemm::dweight ? dim3(ceil_div(K, kTileM), n_tiles, E)
                                               : dim3(ceil_div(rows, kTileM) + E, n_tiles, 1);
    launch(moe_grouped_gemm_kernel<T>, grid, dim3(kThreads), 2 * kTileM * kLd * sizeof(T), stream, kind, out, a, b,
           offsets, E, K, Nout);
}

template void moe_grouped_gemm<float>(MoeGemm, float*, const float*, const float*, const int*, int, int, int, int,
                                      cudaStream_t);
template void moe_grouped_gemm<__nv_bfloat16>(MoeGemm, __nv_bfloat16*, const __nv_bfloat16*,
                                              const __nv_bfloat16*, const int*, int, int, int, int, cudaStream_t);

}  // namespace llmtrain::cuda
