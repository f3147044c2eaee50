// model/cuda/flash_attention.cu — causal multi-head attention in bf16 on tensor cores:
// FlashAttention-2 (Tri Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
// Partitioning", 2023; forward Algorithm 1, backward Algorithm 2), with the warp-level matrix
// multiply of model/cuda/mma.cuh (wmma 16x16x16, bf16 inputs, fp32 accumulators). The path of
// model.attention = "native" in bf16 at head sizes 64 and 128 (attention.cu, on CUDA cores, is the
// fp32 path and the reference).
//
// Layout as attention.cu: qkv (B,T,3C) holds q | k | v, each (NH,HS) per position; out (B,T,C);
// lse (B,NH,T) the log-sum-exp of each row of scaled scores s_ij = q_i.k_j / sqrt(HS), j <= i.
// Grouped-query attention (Ainslie et al. 2023): qkv (B,T,(NH + 2 NKV)*HS) with NKV key/value heads
// (C = NH*HS still the query width); query head h reads key/value head g = h / (NH/NKV) straight
// from qkv (the forward and dQ blocks of head h load g's K and V tiles), and the dK/dV kernel runs
// one block per key tile of key/value head g that walks the NH/NKV query heads of its group in
// order, accumulating in the same fp32 fragments: no expanded copy, no atomics. NKV = NH is MHA.
// Every kernel: a block of 4 warps owns 64 rows of one (b, h), 16 per warp (one wmma tile high),
// and walks the other side in tiles of 64 staged in shared memory as bf16 (rows past T as zeros).
// wmma's fragment layout is unspecified, so fragments are only loaded, multiplied, scaled
// uniformly and stored: scores go through a per-warp fp32 tile in shared memory, where lane
// 2r + half owns row r and the columns of parity `half` (row statistics then need one shuffle).
//   Forward (Algorithm 1): S = Q_w K^T; the online softmax (m, l, O in fp32 registers) rescales O;
//     P is rounded to bf16 and O += P V (its own mma, added in fp32); out = O / l, lse = m + log l.
//   Backward (Algorithm 2, split in two kernels so that nothing is accumulated across blocks:
//   no atomics, every sum in a fixed order, the same bits every run):
//     D_i = dO_i . O_i (attention.cu's delta kernel), P = exp(S - lse), dS = P o (dP - D), dP = dO V^T;
//     key kernel:   per 16 keys of a warp, over query tiles i >= j: dV += P^T dO, dK += dS^T Q
//                   (fp32 accumulator fragments held across the loop), dK scaled by 1/sqrt(HS);
//     query kernel: per 16 queries of a warp, over key tiles j <= i: dQ += dS K, scaled likewise.
//   P and dS enter the mma rounded to bf16, as in FlashAttention-2 and cuDNN (the error bound of
//   tests/cuda/attention_bound.hpp).
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/cuda/kernels.cuh"
#include "model/cuda/mma.cuh"

namespace llmtrain::cuda {

using bf16 = __nv_bfloat16;
constexpr int kFlashRows = 64;                          ///< rows a block owns: 16 per warp
constexpr int kFlashTile = 64;                          ///< rows of the other side per inner step
constexpr int kFlashWarps = kFlashRows / kMmaTile;      ///< 4
constexpr int kFlashThreads = kFlashWarps * kWarpSize;  ///< 128 (__launch_bounds__(128, 1): up to 255
                                                        ///< registers, no spills; docs/cuda.md)
constexpr int kPLd = kFlashTile + 8;                    ///< row stride of a warp's bf16 P / dS tile
constexpr int kSLd = kFlashTile + 4;                    ///< row stride of a warp's fp32 score tile
template <int HS>
constexpr int kRowLd = HS + 8;  ///< row stride of a bf16 (64, HS) tile (+16 bytes against bank conflicts)
template <int HS>
constexpr int kOutLd = HS + 4;  ///< row stride of a warp's fp32 (16, HS) staging tile
template <int HS>
constexpr size_t kRowTileBytes = sizeof(bf16) * kFlashRows * kRowLd<HS>;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// The dynamic shared memory rounded up to 32 bytes (wmma's 256-bit pointer alignment; every
/// buffer below is a multiple of 32 bytes long, so all tiles stay aligned).
__device__ inline unsigned char* flash_smem(unsigned char* raw) {
    return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 31) & ~uintptr_t{31});
}

/// Copies rows [r0, r0 + 64) of src (row r at src + r * stride, HS bf16 each) into tile (64 x
/// kRowLd), rows >= T as zeros: masked probabilities then multiply zeros, never garbage.
template <int HS>
__device__ inline void load_rows(bf16* tile, const bf16* src, size_t stride, int r0, int T_) {
    constexpr int kPacks = HS / kPackElems;
    for (int x = threadIdx.x; x < kFlashRows * kPacks; x += kFlashThreads) {
        const int r = x / kPacks, c = (x % kPacks) * kPackElems;
        Pack<bf16> p;
        if (r0 + r < T_) p = load_pack(src + static_cast<size_t>(r0 + r) * stride + c);
        else
            for (auto& e : p.v) e = __float2bfloat16(0.0f);
        store_pack(tile + r * kRowLd<HS> + c, p);
    }
}

/// s (16 x 64 fp32, row stride ld) = a (16 x HS) b^T for b (64 x HS): both bf16 row tiles.
template <int HS>
__device__ inline void score_tile(float* s, int ld, const bf16* a, const bf16* b) {
    for (int nt = 0; nt < kFlashTile / kMmaTile; nt++) {
        FragAcc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kt = 0; kt < HS / kMmaTile; kt++) {
            FragA fa;
            FragBCol fb;  // b^T's column n is b's row n
            wmma::load_matrix_sync(fa, a + kt * kMmaTile, kRowLd<HS>);
            wmma::load_matrix_sync(fb, b + nt * kMmaTile * kRowLd<HS> + kt * kMmaTile, kRowLd<HS>);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(s + nt * kMmaTile, acc, ld, wmma::mem_row_major);
    }
}

/// acc[n] += p (16 x 64 bf16, row stride kPLd) times columns [16n, 16n + 16) of rows (64 x HS).
template <int HS>
__device__ inline void accumulate_product(FragAcc* acc, const bf16* p, const bf16* rows) {
    for (int nt = 0; nt < HS / kMmaTile; nt++)
        for (int kt = 0; kt < kFlashTile / kMmaTile; kt++) {
            FragA fa;
            FragBRow fb;
            wmma::load_matrix_sync(fa, p + kt * kMmaTile, kPLd);
            wmma::load_matrix_sync(fb, rows + kt * kMmaTile * kRowLd<HS> + nt * kMmaTile, kRowLd<HS>);
            wmma::mma_sync(acc[nt], fa, fb, acc[nt]);
        }
}

/// Writes factor * acc (a warp's 16 x HS rows) as bf16 to dst (row r at dst + r * stride) for the
/// rows r0 + r < T, through the warp's fp32 staging tile `stage` (16 x kOutLd).
template <int HS>
__device__ inline void write_rows(bf16* dst, size_t stride, FragAcc* acc, float factor, float* stage, int r0,
                                  int T_) {
    const int lane = threadIdx.x % kWarpSize, r = lane / 2, half = lane % 2;
    for (int nt = 0; nt < HS / kMmaTile; nt++) {
        for (int e = 0; e < acc[nt].num_elements; e++) acc[nt].x[e] *= factor;  // uniform: layout-free
        wmma::store_matrix_sync(stage + nt * kMmaTile, acc[nt], kOutLd<HS>, wmma::mem_row_major);
    }
    __syncwarp(kFullMask);
    if (r0 + r < T_)
        for (int d = half; d < HS; d += 2)
            dst[static_cast<size_t>(r0 + r) * stride + d] = __float2bfloat16(stage[r * kOutLd<HS> + d]);
    __syncwarp(kFullMask);  // the stage is read before it is written again
}

/// Forward, Algorithm 1. grid (ceil(T/64), NH, B), block 128, smem flash_forward_smem<HS>():
/// q, k, v tiles (64 x kRowLd bf16 each), per warp an fp32 tile (16 x max(64, HS) + 4) for S and
/// then P V, and a bf16 P tile (16 x kPLd).
template <int HS>
__global__ void __launch_bounds__(kFlashThreads, 1)
    flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T_, int C, int NH, int NKV) {
    constexpr int kWideLd = (HS > kFlashTile ? HS : kFlashTile) + 4;
    EXTERN_SHARED(unsigned char, raw);
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, r = lane / 2, half = lane % 2;
    bf16* qs = reinterpret_cast<bf16*>(flash_smem(raw));
    bf16* ks = qs + kFlashRows * kRowLd<HS>;
    bf16* vs = ks + kFlashRows * kRowLd<HS>;
    float* ss = reinterpret_cast<float*>(vs + kFlashRows * kRowLd<HS>) + warp * kMmaTile * kWideLd;
    bf16* ps = reinterpret_cast<bf16*>(reinterpret_cast<float*>(vs + kFlashRows * kRowLd<HS>) +
                                       kFlashWarps * kMmaTile * kWideLd) + warp * kMmaTile * kPLd;
    const int b = blockIdx.z, h = blockIdx.y;
    const int i0 = (gridDim.x - 1 - blockIdx.x) * kFlashRows;  // the longest rows start first
    const int i = i0 + warp * kMmaTile + r;
    const bool active = i0 + warp * kMmaTile < T_;  // warp-uniform: the warp has a row < T
    const size_t stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    const bf16* src = qkv + static_cast<size_t>(b) * T_ * stride + h * HS;
    const bf16* ksrc = qkv + static_cast<size_t>(b) * T_ * stride + C + (h / (NH / NKV)) * HS;
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    load_rows<HS>(qs, src, stride, i0, T_);
    float m = -INFINITY, l = 0.0f, o[HS / 2] = {};
    for (int k0 = 0; k0 <= i0; k0 += kFlashTile) {  // tiles with a key j <= i of some row
        __syncthreads();  // the previous k, v tiles are no longer read (q is loaded)
        load_rows<HS>(ks, ksrc, stride, k0, T_);
        load_rows<HS>(vs, ksrc + NKV * HS, stride, k0, T_);
        __syncthreads();
        if (!active) continue;
        score_tile<HS>(ss, kWideLd, qs + warp * kMmaTile * kRowLd<HS>, ks);
        __syncwarp(kFullMask);
        // Online softmax of row i over this lane's 32 keys: key k0 <= i is visible to every row
        // (also rows past T, which see keys < T and are never written), so m_new is finite.
        float s[kFlashTile / 2], mx = -INFINITY;
        for (int jj = 0; jj < kFlashTile / 2; jj++) {
            const int c = half + 2 * jj, j = k0 + c;
            s[jj] = j <= i && j < T_ ? ss[r * kWideLd + c] * scale : -INFINITY;
            mx = fmaxf(mx, s[jj]);
        }
        const float m_new = fmaxf(m, fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1)));
        float sum = 0.0f;
        for (int jj = 0; jj < kFlashTile / 2; jj++) {
            const float p = expf(s[jj] - m_new);  // 0 for masked keys
            sum += p;
            ps[r * kPLd + half + 2 * jj] = __float2bfloat16(p);
        }
        const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
        l = l * corr + (sum + __shfl_xor_sync(kFullMask, sum, 1));
        m = m_new;
        for (int jj = 0; jj < HS / 2; jj++) o[jj] *= corr;
        __syncwarp(kFullMask);  // P is complete and S is read: ss takes P V
        for (int nt = 0; nt < HS / kMmaTile; nt++) {
            FragAcc acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kt = 0; kt < kFlashTile / kMmaTile; kt++) {
                FragA fa;
                FragBRow fb;
                wmma::load_matrix_sync(fa, ps + kt * kMmaTile, kPLd);
                wmma::load_matrix_sync(fb, vs + kt * kMmaTile * kRowLd<HS> + nt * kMmaTile, kRowLd<HS>);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(ss + nt * kMmaTile, acc, kWideLd, wmma::mem_row_major);
        }
        __syncwarp(kFullMask);
        for (int jj = 0; jj < HS / 2; jj++) o[jj] += ss[r * kWideLd + half + 2 * jj];
    }
    if (!active || i >= T_) return;
    bf16* out_row = out + (static_cast<size_t>(b) * T_ + i) * C + h * HS;
    for (int jj = 0; jj < HS / 2; jj++) out_row[half + 2 * jj] = __float2bfloat16(o[jj] / l);
    if (half == 0) lse[(static_cast<size_t>(b) * NH + h) * T_ + i] = m + logf(l);
}

/// Dynamic shared memory bytes of flash_forward_kernel<HS> (+32 for the alignment of flash_smem).
template <int HS>
constexpr size_t flash_forward_smem() {
    constexpr int kWideLd = (HS > kFlashTile ? HS : kFlashTile) + 4;
    return 32 + 3 * kRowTileBytes<HS> + kFlashWarps * kMmaTile * (sizeof(float) * kWideLd + sizeof(bf16) * kPLd);
}

/// Backward, dK and dV (Algorithm 2's outer loop over key tiles) of key/value head g = blockIdx.y,
/// summed over its query heads g*group .. (g+1)*group - 1 in order. grid (ceil(T/64), NKV, B), block
/// 128, smem flash_backward_kv_smem<HS>(): k, v, q, dO tiles (64 x kRowLd bf16 each), the query
/// tile's lse and D (64 fp32 each), per warp fp32 S^T and dP^T tiles (16 x kSLd) and bf16 P^T and
/// dS^T tiles (16 x kPLd). The q and dO tiles stage the results at the end.
template <int HS, bool kGroups>
__global__ void __launch_bounds__(kFlashThreads, 1)
    flash_backward_kv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta,
                             int T_, int C, int NH, int NKV) {
    EXTERN_SHARED(unsigned char, raw);
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, r = lane / 2, half = lane % 2;
    bf16* ks = reinterpret_cast<bf16*>(flash_smem(raw));
    bf16* vs = ks + kFlashRows * kRowLd<HS>;
    bf16* qs = vs + kFlashRows * kRowLd<HS>;
    bf16* dos = qs + kFlashRows * kRowLd<HS>;
    float* lses = reinterpret_cast<float*>(dos + kFlashRows * kRowLd<HS>);
    float* deltas = lses + kFlashTile;
    float* st = deltas + kFlashTile + warp * 2 * kMmaTile * kSLd;
    float* dpt = st + kMmaTile * kSLd;
    bf16* pt = reinterpret_cast<bf16*>(deltas + kFlashTile + kFlashWarps * 2 * kMmaTile * kSLd) +
               warp * 2 * kMmaTile * kPLd;
    bf16* dst = pt + kMmaTile * kPLd;
    const int b = blockIdx.z, g = blockIdx.y, j0 = blockIdx.x * kFlashRows;
    const int jw = j0 + warp * kMmaTile, j = jw + r;
    const bool active = jw < T_;  // warp-uniform
    const size_t stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    load_rows<HS>(ks, qkv + static_cast<size_t>(b) * T_ * stride + C + g * HS, stride, j0, T_);
    load_rows<HS>(vs, qkv + static_cast<size_t>(b) * T_ * stride + C + (NKV + g) * HS, stride, j0, T_);
    FragAcc dk[HS / kMmaTile], dv[HS / kMmaTile];
    for (int nt = 0; nt < HS / kMmaTile; nt++) {
        wmma::fill_fragment(dk[nt], 0.0f);
        wmma::fill_fragment(dv[nt], 0.0f);
    }
    // The group's query heads in order (kGroups; else head g alone), each over the query tiles with
    // an i >= j of some key (j0 < T: the grid's tiles). The loop steps (h, q0) in one counter pair:
    // nested loops cost the HS-128 kernel a spill at 255 registers.
    int h = kGroups ? g * (NH / NKV) : g;
    for (int q0 = j0;;) {
        const size_t stat = (static_cast<size_t>(b) * NH + h) * T_;
        const bf16* src = qkv + static_cast<size_t>(b) * T_ * stride + h * HS;  // from the kernel's
        const bf16* dsrc = dout + static_cast<size_t>(b) * T_ * C + h * HS;      // parameters, not kept
        __syncthreads();
        load_rows<HS>(qs, src, stride, q0, T_);
        load_rows<HS>(dos, dsrc, C, q0, T_);
        for (int x = threadIdx.x; x < kFlashTile; x += kFlashThreads) {
            lses[x] = q0 + x < T_ ? lse[stat + q0 + x] : 0.0f;
            deltas[x] = q0 + x < T_ ? delta[stat + q0 + x] : 0.0f;
        }
        __syncthreads();
        if (active) {
            score_tile<HS>(st, kSLd, ks + warp * kMmaTile * kRowLd<HS>, qs);    // S^T (16 keys x 64 queries)
            score_tile<HS>(dpt, kSLd, vs + warp * kMmaTile * kRowLd<HS>, dos);  // dP^T
            __syncwarp(kFullMask);
            for (int jj = 0; jj < kFlashTile / 2; jj++) {
                const int c = half + 2 * jj, i = q0 + c;
                float p = 0.0f, ds = 0.0f;
                if (i < T_ && i >= j) {
                    p = expf(st[r * kSLd + c] * scale - lses[c]);
                    ds = p * (dpt[r * kSLd + c] - deltas[c]);
                }
                pt[r * kPLd + c] = __float2bfloat16(p);
                dst[r * kPLd + c] = __float2bfloat16(ds);
            }
            __syncwarp(kFullMask);
            accumulate_product<HS>(dv, pt, dos);
            accumulate_product<HS>(dk, dst, qs);
        }
        q0 += kFlashTile;
        if (q0 < T_) continue;
        if (!kGroups || ++h == (g + 1) * (NH / NKV)) break;
        q0 = j0;
    }
    __syncthreads();  // every warp is done with q and dO: they become the staging tiles
    if (!active) return;
    float* stage = reinterpret_cast<float*>(qs) + warp * kMmaTile * kOutLd<HS>;
    bf16* dk_rows = dqkv + static_cast<size_t>(b) * T_ * stride + C + g * HS;
    write_rows<HS>(dk_rows, stride, dk, scale, stage, jw, T_);
    write_rows<HS>(dk_rows + NKV * HS, stride, dv, 1.0f, stage, jw, T_);
}

/// Dynamic shared memory bytes of flash_backward_kv_kernel<HS> (+32 for the alignment of flash_smem).
template <int HS>
constexpr size_t flash_backward_kv_smem() {
    static_assert(kFlashWarps * kMmaTile * kOutLd<HS> * sizeof(float) <= 2 * kRowTileBytes<HS>);
    return 32 + 4 * kRowTileBytes<HS> + 2 * kFlashTile * sizeof(float) +
           kFlashWarps * 2 * kMmaTile * (sizeof(float) * kSLd + sizeof(bf16) * kPLd);
}

/// Backward, dQ (Algorithm 2's dQ_i, one block per query tile so no block adds into another's).
/// grid (ceil(T/64), NH, B), block 128, smem flash_backward_q_smem<HS>(): q, dO, k, v tiles (64 x
/// kRowLd bf16 each), per warp fp32 S and dP tiles (16 x kSLd) and a bf16 dS tile (16 x kPLd). The
/// k and v tiles stage the result at the end.
template <int HS>
__global__ void __launch_bounds__(kFlashThreads, 1)
    flash_backward_q_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta,
                            int T_, int C, int NH, int NKV) {
    EXTERN_SHARED(unsigned char, raw);
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, r = lane / 2, half = lane % 2;
    bf16* qs = reinterpret_cast<bf16*>(flash_smem(raw));
    bf16* dos = qs + kFlashRows * kRowLd<HS>;
    bf16* ks = dos + kFlashRows * kRowLd<HS>;
    bf16* vs = ks + kFlashRows * kRowLd<HS>;
    float* ss = reinterpret_cast<float*>(vs + kFlashRows * kRowLd<HS>) + warp * 2 * kMmaTile * kSLd;
    float* dps = ss + kMmaTile * kSLd;
    bf16* dss = reinterpret_cast<bf16*>(reinterpret_cast<float*>(vs + kFlashRows * kRowLd<HS>) +
                                        kFlashWarps * 2 * kMmaTile * kSLd) + warp * kMmaTile * kPLd;
    const int b = blockIdx.z, h = blockIdx.y;
    const int i0 = (gridDim.x - 1 - blockIdx.x) * kFlashRows, iw = i0 + warp * kMmaTile, i = iw + r;
    const bool active = iw < T_;  // warp-uniform
    const size_t stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    const size_t stat = (static_cast<size_t>(b) * NH + h) * T_;
    const bf16* src = qkv + static_cast<size_t>(b) * T_ * stride + h * HS;
    const bf16* ksrc = qkv + static_cast<size_t>(b) * T_ * stride + C + (h / (NH / NKV)) * HS;
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    load_rows<HS>(qs, src, stride, i0, T_);
    load_rows<HS>(dos, dout + static_cast<size_t>(b) * T_ * C + h * HS, C, i0, T_);
    const float lse_i = i < T_ ? lse[stat + i] : 0.0f, delta_i = i < T_ ? delta[stat + i] : 0.0f;
    FragAcc dq[HS / kMmaTile];
    for (int nt = 0; nt < HS / kMmaTile; nt++) wmma::fill_fragment(dq[nt], 0.0f);
    for (int k0 = 0; k0 <= i0; k0 += kFlashTile) {
        __syncthreads();
        load_rows<HS>(ks, ksrc, stride, k0, T_);
        load_rows<HS>(vs, ksrc + NKV * HS, stride, k0, T_);
        __syncthreads();
        if (!active) continue;
        score_tile<HS>(ss, kSLd, qs + warp * kMmaTile * kRowLd<HS>, ks);    // S (16 queries x 64 keys)
        score_tile<HS>(dps, kSLd, dos + warp * kMmaTile * kRowLd<HS>, vs);  // dP
        __syncwarp(kFullMask);
        for (int jj = 0; jj < kFlashTile / 2; jj++) {
            const int c = half + 2 * jj, j = k0 + c;
            float ds = 0.0f;
            if (i < T_ && j <= i) {
                const float p = expf(ss[r * kSLd + c] * scale - lse_i);
                ds = p * (dps[r * kSLd + c] - delta_i);
            }
            dss[r * kPLd + c] = __float2bfloat16(ds);
        }
        __syncwarp(kFullMask);
        accumulate_product<HS>(dq, dss, ks);
    }
    __syncthreads();  // every warp is done with k and v: they become the staging tiles
    if (!active) return;
    float* stage = reinterpret_cast<float*>(ks) + warp * kMmaTile * kOutLd<HS>;
    write_rows<HS>(dqkv + static_cast<size_t>(b) * T_ * stride + h * HS, stride, dq, scale, stage, iw, T_);
}

/// Dynamic shared memory bytes of flash_backward_q_kernel<HS> (+32 for the alignment of flash_smem).
template <int HS>
constexpr size_t flash_backward_q_smem() {
    static_assert(kFlashWarps * kMmaTile * kOutLd<HS> * sizeof(float) <= 2 * kRowTileBytes<HS>);
    return 32 + 4 * kRowTileBytes<HS> + kFlashWarps * kMmaTile * (2 * sizeof(float) * kSLd + sizeof(bf16) * kPLd);
}

/// Throws std::invalid_argument for a shape or pointer the kernels do not take.
static void check_flash(int C, int NH, int NKV, std::initializer_list<const void*> ptrs) {
    if (!flash_attention_supported(C, NH))
        throw std::invalid_argument("cuda flash attention: n_embd " + std::to_string(C) + " / n_head " +
                                    std::to_string(NH) + " must be a head size of 64 or 128");
    if (NKV < 1 || NH % NKV != 0)
        throw std::invalid_argument("cuda flash attention: n_kv_head " + std::to_string(NKV) +
                                    " must divide n_head " + std::to_string(NH));
    for (const void* p : ptrs)
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
            throw std::invalid_argument("cuda flash attention: tensor pointers must be 16-byte aligned");
}

/// Launches kernel with smem bytes of dynamic shared memory (above the default 48 KiB: opted in).
template <typename... P, typename... A>
static void launch_flash(void (*kernel)(P...), dim3 grid, size_t smem, cudaStream_t stream, A... args) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch(kernel, grid, dim3(kFlashThreads), smem, stream, args...);
}

template <int HS>
static void flash_forward(bf16* out, float* lse, const bf16* qkv, int B, int T_, int C, int NH, int NKV,
                          cudaStream_t stream) {
    launch_flash(flash_forward_kernel<HS>, dim3(ceil_div(T_, kFlashRows), NH, B), flash_forward_smem<HS>(), stream,
                 out, lse, qkv, T_, C, NH, NKV);
}

template <int HS>
static void flash_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta,
                           int B, int T_, int C, int NH, int NKV, cudaStream_t stream) {
    const dim3 grid(ceil_div(T_, kFlashRows), NH, B);
    if (NKV == NH)  // multi-head: no group loop (the kernel GPT-2 runs keeps its registers)
        launch_flash(flash_backward_kv_kernel<HS, false>, grid, flash_backward_kv_smem<HS>(), stream, dqkv, dout, qkv,
                     lse, delta, T_, C, NH, NKV);
    else
        launch_flash(flash_backward_kv_kernel<HS, true>, dim3(grid.x, NKV, B), flash_backward_kv_smem<HS>(), stream,
                     dqkv, dout, qkv, lse, delta, T_, C, NH, NKV);
    launch_flash(flash_backward_q_kernel<HS>, grid, flash_backward_q_smem<HS>(), stream, dqkv, dout, qkv, lse, delta,
                 T_, C, NH, NKV);
}

void flash_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T_, int C, int NH, int NKV,
                             cudaStream_t stream) {
    check_flash(C, NH, NKV, {out, qkv});
    if (C / NH == 64) flash_forward<64>(out, lse, qkv, B, T_, C, NH, NKV, stream);
    else flash_forward<128>(out, lse, qkv, B, T_, C, NH, NKV, stream);
}

void flash_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse, int B,
                              int T_, int C, int NH, int NKV, float* scratch, cudaStream_t stream) {
    check_flash(C, NH, NKV, {dqkv, dout, qkv, out});
    attention_delta(scratch, dout, out, B, T_, C, NH, stream);
    if (C / NH == 64) flash_backward<64>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream);
    else flash_backward<128>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream);
}

}  // namespace llmtrain::cuda
