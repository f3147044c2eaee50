// model/cuda/flash_attention.cu — causal multi-head and grouped-query attention in bf16 on tensor
// cores: FlashAttention-2 as Tri Dao's paper builds it ("FlashAttention-2: Faster Attention with
// Better Parallelism and Work Partitioning", 2023; forward Algorithm 1, backward Algorithm 2), on
// the PTX primitives of model/cuda/ptx.cuh: mma.sync m16n8k16 (bf16 in, fp32 accumulate) with
// operands from ldmatrix, K/V (forward) and Q/dO (backward) tiles double-buffered with cp.async.
// The path of model.attention = "native" in bf16 at head sizes 64 and 128 (attention.cu, on CUDA
// cores, is the fp32 path and the reference). Our own code from the paper and the PTX ISA.
//
// Layout as attention.cu: qkv (B,T,(NH + 2 NKV)*HS) holds q | k | v per position (NKV = NH: (B,T,3C));
// out (B,T,C), C = NH*HS; lse (B,NH,T) the log-sum-exp of each row of scaled scores
// s_ij = q_i.k_j / sqrt(HS), j <= i. Query head h reads key/value head h / (NH/NKV) straight from
// qkv (Ainslie et al. 2023); NKV = NH is multi-head attention.
//
// Fragments (PTX ISA "Matrix Fragments for mma.m16n8k16"; g = lane / 4, t = lane % 4): an fp32
// accumulator tile 16x8 holds rows g and g + 8, columns 2t and 2t + 1 in each lane; so do the
// bf16 A fragments of a 16x16 tile (columns 2t, 2t + 1 and 2t + 8, 2t + 9). Two neighbouring
// accumulator tiles of S (16 x 16 keys) are therefore, rounded to bf16 and packed in pairs, the
// A fragment of P for P V: S, P and O never leave registers (the FA2 register trick). Row
// statistics are per lane (two rows) and reduced over the four lanes of a quad by shuffles.
//
// Forward (Algorithm 1): a block owns 128 query rows of one (b, h) — 4 warps of 32 rows (two m16
//   tiles) at HS 64, 8 warps of 16 at HS 128 — loads Q once (cp.async into K/V stage 1, then
//   ldmatrix into registers kept for the whole loop), and walks the key blocks of 64 up to its
//   diagonal, K and V double-buffered (block kb + 1 is copied while block kb is used). Per block:
//   S = Q K^T (mma), the online softmax in the log2 domain (m, l per row; O rescaled by
//   exp2(m_old - m_new)), P = exp2(S log2e/sqrt(HS) - m) rounded to bf16 into A fragments, O += P V
//   with V's B fragments from ldmatrix.trans. The causal mask is applied only where the key block
//   crosses a warp's rows; blocks entirely past a warp's rows are skipped by that warp; key blocks
//   past the block's last row are never loaded. out = O / l, lse = m ln 2 + log l.
// Backward (Algorithm 2, fused): D = rowsum(dO o O) first (attention.cu's delta kernel). One block
//   per key block of key/value head g — 128 keys (8 warps x 16), or at HS 128 on a device whose
//   opt-in shared memory per block is under their 115,328 B (sm_86/89/120: 99 KiB) 64 keys (4
//   warps; flash_backward_keys, flash_attention.hpp) — holds K and V in shared memory and dK, dV in
//   registers, and walks its group's query heads in order and, per head, the query blocks
//   (64 rows at HS 64, 32 at HS 128) from its diagonal to T, Q, dO, lse and D double-buffered.
//   Per query block each warp computes S^T = K_w Q^T and dP^T = V_w dO^T (16 keys x the block's
//   queries), P^T = exp2(S^T log2e/sqrt(HS) - lse log2e), dS^T = P^T o (dP^T - D), then
//   dV += P^T dO and dK += dS^T Q with P^T, dS^T as A fragments straight from the accumulators.
//   dS^T goes to shared memory (bf16); after a barrier the warps compute this key block's dQ
//   partial, dS K (A fragments of dS by ldmatrix.trans of dS^T), and store it in fp32 to the
//   workspace: (b, h, key block kb, query row i >= kb x the block's keys). A second kernel sums each dQ row's
//   partials in key-block order, scales by 1/sqrt(HS) and writes bf16: no atomics, every sum in a
//   fixed order, the same bits every run. dK (scaled) and dV are written once at the end. The
//   workspace holds the partials of as many batch rows as fit flash_dq_workspace_cap (256 MiB);
//   larger batches run as several (fused kernel, sum) pairs in stream order on the same workspace.
//   P and dS enter the mma rounded to bf16, as in FlashAttention-2 and cuDNN (the error bound of
//   tests/cuda/attention_bound.hpp).
// Rows past T are zero-filled by cp.async (src-size 0) and masked where they would contribute.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/cuda/kernels.cuh"
#include "model/cuda/mma_fragments.cuh"
#include "model/cuda/ptx.cuh"

namespace llmtrain::cuda {

using bf16 = __nv_bfloat16;
constexpr int kKeys = flash_key_rows();                 ///< 64 keys per forward step
template <int HS>
constexpr int kTileLd = flash_tile_ld(HS);  ///< namespace-scope constants: usable in device code
template <int HS>
constexpr int kFwdRows = flash_forward_rows(HS);
template <int HS>
constexpr int kFwdThreads = flash_forward_warps(HS) * kWarpSize;  ///< 128 at HS 64, 256 at 128
template <int HS>
constexpr int kBwdRows = flash_backward_rows(HS);
template <int KEYS>
constexpr int kBwdThreads = flash_backward_warps(KEYS) * kWarpSize;  ///< 256 for 128 keys, 128 for 64
template <int HS, int KEYS>
constexpr size_t kBwdSmem = flash_backward_smem_bytes(HS, KEYS);  ///< 93,312 / 75,392 / 115,328 B
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// The dynamic shared memory rounded up to 128 bytes (cp.async and ldmatrix want 16).
__device__ inline unsigned char* flash_smem(unsigned char* raw) {
    return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 127) & ~uintptr_t{127});
}

/// Starts the copy of rows [r0, r0 + kRows) of src (row r at src + r * stride, HS bf16 each) into
/// tile (kRows x flash_tile_ld(HS)), rows >= T as zeros, by kThreads threads; the caller commits and waits.
template <int HS, int kRows, int kThreads>
__device__ inline void copy_rows(bf16* tile, const bf16* src, size_t stride, int r0, int T_) {
    constexpr int kChunks = HS / 8, kLd = kTileLd<HS>;
    for (int x = threadIdx.x; x < kRows * kChunks; x += kThreads) {
        const int r = x / kChunks, c = (x % kChunks) * 8;
        const bool valid = r0 + r < T_;
        ptx::cp_async_16(tile + r * kLd + c, valid ? src + static_cast<size_t>(r0 + r) * stride + c : src, valid);
    }
}

/// flash_dq_partial_rows(T, KEYS) on the device: the dQ partial rows of one (b, h) with KEYS keys
/// per backward block.
template <int KEYS>
__device__ inline size_t dq_partial_rows(int T_) {
    const size_t nkb = ceil_div(T_, KEYS);
    return nkb * static_cast<size_t>(T_) - static_cast<size_t>(KEYS) * nkb * (nkb - 1) / 2;
}
/// The first dQ partial row of key block kb (KEYS keys per block) within its (b, h): blocks
/// 0 .. kb-1 hold T - KEYS k rows each (the rows from their first key on).
template <int KEYS>
__device__ inline size_t dq_partial_first(int T_, int kb) {
    return static_cast<size_t>(kb) * T_ - static_cast<size_t>(KEYS) * kb * (kb - 1) / 2;
}

/// Forward, Algorithm 1. grid (NH, ceil(T / kRows), B), block kFwdThreads<HS> (128 at HS 64, 256
/// at 128), smem flash_forward_smem_bytes(HS).
template <int HS>
__global__ void __launch_bounds__(kFwdThreads<HS>, 1)
    flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T_, int C, int NH, int NKV) {
    constexpr int kMT = HS == 64 ? 2 : 1;  // m16 tiles per warp
    constexpr int kThreads = kFwdThreads<HS>, kWarps = kThreads / kWarpSize;
    constexpr int kRows = kFwdRows<HS>;  // kWarps x 16 kMT
    constexpr int kLd = kTileLd<HS>;
    constexpr int kKS = HS / 16, kNS = kKeys / 8, kNO = HS / 8;
    static_assert(kRows == kWarps * 16 * kMT && kRows == 2 * kKeys);
    EXTERN_SHARED(unsigned char, raw);
    bf16* kv = reinterpret_cast<bf16*>(flash_smem(raw));  // stage s: K at kv + s * 2 * kKeys * kLd, V after it
    bf16* qs = kv + 2 * kKeys * kLd;  // the Q tile fills stage 1 until its fragments are in registers
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t4 = lane % 4;
    // blockIdx.x = h varies fastest, so within a batch row every head's block of the last rows (the
    // most key blocks) starts before any shorter one: the grid ends on short blocks, a short tail.
    const int b = blockIdx.z, h = blockIdx.x;
    const int i0 = (gridDim.y - 1 - blockIdx.y) * kRows;
    const int iw = i0 + warp * 16 * kMT;                  // the warp's first row
    const size_t stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    const bf16* qsrc = qkv + static_cast<size_t>(b) * T_ * stride + h * HS;
    const bf16* ksrc = qkv + static_cast<size_t>(b) * T_ * stride + C + (h / (NH / NKV)) * HS;
    const bf16* vsrc = ksrc + static_cast<size_t>(NKV) * HS;
    const int n_kb = ceil_div(min(i0 + kRows, T_), kKeys);  // key blocks with a key <= the last row
    copy_rows<HS, kRows, kThreads>(qs, qsrc, stride, i0, T_);
    copy_rows<HS, kKeys, kThreads>(kv, ksrc, stride, 0, T_);
    copy_rows<HS, kKeys, kThreads>(kv + kKeys * kLd, vsrc, stride, 0, T_);
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[kMT][kKS][4];  // Q's A fragments, loaded once
    for (int mt = 0; mt < kMT; mt++)
        for (int kk = 0; kk < kKS; kk++) load_a(qf[mt][kk], qs + (warp * kMT + mt) * 16 * kLd + kk * 16, kLd);
    __syncthreads();  // every warp has its Q fragments: stage 1 may take key block 1
    const float sl2 = kLog2e / sqrtf(static_cast<float>(HS));
    float o[kMT][kNO][4], m[kMT][2], l[kMT][2];
    for (int mt = 0; mt < kMT; mt++) {
        for (int n = 0; n < kNO; n++)
            for (int e = 0; e < 4; e++) o[mt][n][e] = 0.0f;
        for (int r = 0; r < 2; r++) {
            m[mt][r] = -INFINITY;
            l[mt][r] = 0.0f;
        }
    }
    const bool active = iw < T_;  // warp-uniform: the warp has a row < T
    for (int kb = 0; kb < n_kb; kb++) {
        const int stage = kb % 2, k0 = kb * kKeys;
        if (kb + 1 < n_kb) {  // block kb + 1 into the other stage (its last reader passed the barrier below)
            bf16* next = kv + (stage ^ 1) * 2 * kKeys * kLd;
            copy_rows<HS, kKeys, kThreads>(next, ksrc, stride, k0 + kKeys, T_);
            copy_rows<HS, kKeys, kThreads>(next + kKeys * kLd, vsrc, stride, k0 + kKeys, T_);
            ptx::cp_async_commit();
            ptx::cp_async_wait<1>();
        } else {
            ptx::cp_async_wait<0>();
        }
        __syncthreads();  // block kb is in shared memory for every warp
        const bf16* ks = kv + stage * 2 * kKeys * kLd;
        const bf16* vs = ks + kKeys * kLd;
        if (active && k0 <= iw + 16 * kMT - 1) {  // else every key of the block is past the warp's rows
            float s[kMT][kNS][4];
            for (int mt = 0; mt < kMT; mt++)
                for (int n = 0; n < kNS; n++)
                    for (int e = 0; e < 4; e++) s[mt][n][e] = 0.0f;
            for (int kk = 0; kk < kKS; kk++)
                for (int np = 0; np < kNS / 2; np++) {
                    uint32_t bb[4];
                    load_b_rows(bb, ks + np * 16 * kLd + kk * 16, kLd);
                    for (int mt = 0; mt < kMT; mt++) {
                        mma(s[mt][2 * np], qf[mt][kk], bb);
                        mma(s[mt][2 * np + 1], qf[mt][kk], bb + 2);
                    }
                }
            const bool diag = k0 + kKeys - 1 > iw;  // some key of the block lies past some row of the warp
            for (int mt = 0; mt < kMT; mt++)
                for (int r = 0; r < 2; r++) {
                    const int i = iw + mt * 16 + g + 8 * r;
                    float mx = -INFINITY;
                    for (int n = 0; n < kNS; n++)
                        for (int c = 0; c < 2; c++) {
                            float v = s[mt][n][2 * r + c] * sl2;
                            if (diag && k0 + n * 8 + 2 * t4 + c > i) v = -INFINITY;
                            s[mt][n][2 * r + c] = v;
                            mx = fmaxf(mx, v);
                        }
                    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
                    // Finite: key 0 is visible to every row in block 0, and m is finite after it.
                    const float m_new = fmaxf(m[mt][r], mx);
                    const float corr = exp2f(m[mt][r] - m_new);  // 0 on the first block (m = -inf)
                    m[mt][r] = m_new;
                    float sum = 0.0f;
                    for (int n = 0; n < kNS; n++)
                        for (int c = 0; c < 2; c++) {
                            const float p = exp2f(s[mt][n][2 * r + c] - m_new);  // 0 where masked
                            s[mt][n][2 * r + c] = p;
                            sum += p;
                        }
                    l[mt][r] = l[mt][r] * corr + sum;  // this lane's columns; the quad is summed at the end
                    for (int n = 0; n < kNO; n++) {
                        o[mt][n][2 * r] *= corr;
                        o[mt][n][2 * r + 1] *= corr;
                    }
                }
            for (int kk = 0; kk < kKeys / 16; kk++) {
                uint32_t pa[kMT][4];
                for (int mt = 0; mt < kMT; mt++) acc_to_a(pa[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
                for (int np = 0; np < kNO / 2; np++) {
                    uint32_t bb[4];
                    load_b_cols(bb, vs + kk * 16 * kLd + np * 16, kLd);
                    for (int mt = 0; mt < kMT; mt++) {
                        mma(o[mt][2 * np], pa[mt], bb);
                        mma(o[mt][2 * np + 1], pa[mt], bb + 2);
                    }
                }
            }
        }
        __syncthreads();  // block kb's stage is no longer read: the next step's copy may overwrite it
    }
    if (!active) return;
    for (int mt = 0; mt < kMT; mt++)
        for (int r = 0; r < 2; r++) {
            float lr = l[mt][r];
            lr += __shfl_xor_sync(kFullMask, lr, 1);
            lr += __shfl_xor_sync(kFullMask, lr, 2);
            const int i = iw + mt * 16 + g + 8 * r;
            if (i >= T_) continue;
            const float inv = 1.0f / lr;
            bf16* row = out + (static_cast<size_t>(b) * T_ + i) * C + h * HS + 2 * t4;
            for (int n = 0; n < kNO; n++)
                *reinterpret_cast<uint32_t*>(row + n * 8) =
                    ptx::pack_bf16x2(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
            if (t4 == 0) lse[(static_cast<size_t>(b) * NH + h) * T_ + i] = m[mt][r] * kLn2 + logf(lr);
        }
}

/// Backward, Algorithm 2, fused: dK and dV of key block kb = blockIdx.y (KEYS keys, 16 per warp)
/// of key/value head g = blockIdx.x % NKV (summed over its query heads g*NH/NKV .. in order) of the
/// chunk's batch row z = blockIdx.x / NKV, and that key block's dQ partials. grid (NKV x batch rows
/// of the chunk, ceil(T/KEYS)): x varies fastest, so every head's key block 0 (the most query
/// blocks) starts first, longest first over the whole grid. Batch row b = b0 + z. delta: D
/// (B,NH,T); dq_part: the chunk's partials, flash_dq_partial_rows(T, KEYS) rows of HS floats per
/// (z, h). Dynamic smem flash_backward_smem_bytes(HS, KEYS): K and V (KEYS x (HS + 8) bf16 each),
/// two stages of Q and dO (rows x (HS + 8) bf16 each) and of lse and D (rows fp32), dS^T (KEYS x
/// (rows + 8) bf16), + 128 for alignment. The variants (flash_backward_keys picks one per device):
/// - HS 64, KEYS 128: block 256 threads (8 warps), 64 query rows per step; smem 2 x 128 x 72 x 2 +
///   4 x 64 x 72 x 2 + 128 x 72 x 2 + 1,024 + 128 = 93,312 B.
/// - HS 128, KEYS 128: block 256 (8 warps), 32 rows per step; smem 2 x 128 x 136 x 2 + 4 x 32 x 136
///   x 2 + 128 x 40 x 2 + 512 + 128 = 115,328 B, so only where the device's opt-in limit allows it
///   (sm_90: 227 KiB, sm_80: 163 KiB). FlashAttention-2's own block at head size 128 on A100/H100:
///   against 64 keys half the dQ partials (written once here, read once by the sum: at B 8,
///   T 2048 with 12 heads, the shape measured on an H200, 1.66 GB each way per backward, ~0.7 ms
///   of HBM traffic at 4.8 TB/s, become 0.86 GB; with 16 heads 2.2 GB become 1.1 GB) and each
///   Q/dO tile copied serves 128 keys instead of 64.
/// - HS 128, KEYS 64: block 128 (4 warps), 32 rows per step; smem 2 x 64 x 136 x 2 + 4 x 32 x 136 x
///   2 + 64 x 40 x 2 + 512 + 128 = 75,392 B: the variant for the 99 KiB of sm_86/89/120.
/// Occupancy: at ~240-250 registers a thread (255 allowed by __launch_bounds__(threads, 1) at 128
/// and at 256 threads), a 256-thread block holds an SM's 64K registers and a 128-thread block half
/// of them: 8 warps per SM in every variant (1 block of 8 or 2 of 4); shared memory does not bind.
template <int HS, int KEYS>
__global__ void __launch_bounds__(kBwdThreads<KEYS>, 1)
    flash_backward_kernel(bf16* dqkv, float* dq_part, const bf16* dout, const bf16* qkv, const float* lse,
                          const float* delta, int T_, int C, int NH, int NKV, int b0) {
    constexpr int kRows = kBwdRows<HS>;  // queries per step
    constexpr int kKeys = KEYS, kThreads = kBwdThreads<KEYS>, kWarps = kThreads / kWarpSize;
    constexpr int kLd = kTileLd<HS>, kLdS = kRows + 8;
    constexpr int kKS = HS / 16, kNS = kRows / 8, kND = HS / 8;
    constexpr int kQT = kRows / 16;         // m16 tiles of a query block (dQ: one per warp) ...
    constexpr int kDq = HS / (kWarps / kQT);  // ... and the dQ columns of a warp
    static_assert(kWarps % kQT == 0 && kDq % 16 == 0 && kKeys == 16 * kWarps);
    static_assert(2 * (2 * kKeys * kLd + 4 * kRows * kLd + kKeys * kLdS) + 4 * 4 * kRows + 128 ==
                  kBwdSmem<HS, KEYS>);  // the layout below
    EXTERN_SHARED(unsigned char, raw);
    bf16* ks = reinterpret_cast<bf16*>(flash_smem(raw));
    bf16* vs = ks + kKeys * kLd;
    bf16* qs = vs + kKeys * kLd;        // stage s at qs + s * kRows * kLd
    bf16* dos = qs + 2 * kRows * kLd;   // likewise
    bf16* dss = dos + 2 * kRows * kLd;  // dS^T (kKeys x kLdS)
    float* lses = reinterpret_cast<float*>(dss + kKeys * kLdS);  // stage s: lse * log2e at lses + s * kRows
    float* dels = lses + 2 * kRows;                               // stage s: D
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t4 = lane % 4;
    const int z = blockIdx.x / NKV, b = b0 + z, gkv = blockIdx.x % NKV, kb = blockIdx.y;
    const int j0 = kb * kKeys, jw = j0 + warp * 16;
    const int group = NH / NKV, h0 = gkv * group;
    const size_t stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    const bf16* xb = qkv + static_cast<size_t>(b) * T_ * stride;
    const int nqb = ceil_div(T_ - j0, kRows);  // query blocks from the diagonal (q0 = j0, j0 + kRows, ..)
    const int n_it = group * nqb;
    static_assert(kRows <= kThreads);
    // Queues step it's Q and dO (cp.async) into stage st.
    auto issue = [&](int it, int st) {
        const int h = h0 + it / nqb, q0 = j0 + (it % nqb) * kRows;
        copy_rows<HS, kRows, kThreads>(qs + st * kRows * kLd, xb + h * HS, stride, q0, T_);
        copy_rows<HS, kRows, kThreads>(dos + st * kRows * kLd, dout + static_cast<size_t>(b) * T_ * C + h * HS, C, q0,
                                       T_);
    };
    // Step it's lse and D of query row q0 + threadIdx.x (thread < kRows), read into registers one
    // step before they go to shared memory, so no step waits on these global loads (0 past T / n_it).
    auto load_stats = [&](int it, float& l_, float& d_) {
        l_ = d_ = 0.0f;
        if (threadIdx.x >= kRows || it >= n_it) return;
        const int h = h0 + it / nqb, i = j0 + (it % nqb) * kRows + static_cast<int>(threadIdx.x);
        if (i >= T_) return;
        const size_t stat = (static_cast<size_t>(b) * NH + h) * T_ + i;
        l_ = lse[stat];
        d_ = delta[stat];
    };
    auto put_stats = [&](int st, float l_, float d_) {
        if (threadIdx.x < kRows) {
            lses[st * kRows + threadIdx.x] = l_ * kLog2e;
            dels[st * kRows + threadIdx.x] = d_;
        }
    };
    copy_rows<HS, kKeys, kThreads>(ks, xb + C + gkv * HS, stride, j0, T_);
    copy_rows<HS, kKeys, kThreads>(vs, xb + C + (NKV + gkv) * HS, stride, j0, T_);
    issue(0, 0);
    ptx::cp_async_commit();
    float pre_l, pre_d;  // the stats of the next step, in flight
    load_stats(0, pre_l, pre_d);
    put_stats(0, pre_l, pre_d);
    load_stats(1, pre_l, pre_d);
    const float sl2 = kLog2e / sqrtf(static_cast<float>(HS));
    float dk[kND][4], dv[kND][4];
    for (int n = 0; n < kND; n++)
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (int it = 0; it < n_it; it++) {
        const int st = it % 2, h = h0 + it / nqb, q0 = j0 + (it % nqb) * kRows;
        if (it + 1 < n_it) {  // the other stage's last readers passed the previous step's middle barrier
            issue(it + 1, st ^ 1);
            ptx::cp_async_commit();
            put_stats(st ^ 1, pre_l, pre_d);  // loaded during step it - 1
            load_stats(it + 2, pre_l, pre_d);
            ptx::cp_async_wait<1>();
        } else {
            ptx::cp_async_wait<0>();
        }
        __syncthreads();  // step it's stage (and, at it = 0, K and V) visible to every warp
        const bf16* q = qs + st * kRows * kLd;
        const bf16* d_o = dos + st * kRows * kLd;
        const float* ls = lses + st * kRows;
        const float* ds_ = dels + st * kRows;
        float s[kNS][4], dp[kNS][4];  // S^T and dP^T: 16 keys (rows g, g + 8) x kRows queries
        for (int n = 0; n < kNS; n++)
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        // Warp-uniform: some key of the warp is < T and <= the step's last query. Else P^T = dS^T = 0
        // (the mask below) and the warp only writes its zero rows of dS^T (the diagonal steps of a
        // 128-key block: at HS 64 warps 4-7 against queries j0 .. j0 + 63; at HS 128, 32 queries a
        // step, warps 2-7, 4-7, 6-7 in the first three).
        const bool live = jw < T_ && jw <= q0 + kRows - 1;
        if (live)
        for (int kk = 0; kk < kKS; kk++) {
            uint32_t ka[4], va[4];
            load_a(ka, ks + warp * 16 * kLd + kk * 16, kLd);
            load_a(va, vs + warp * 16 * kLd + kk * 16, kLd);
            for (int np = 0; np < kNS / 2; np++) {
                uint32_t bb[4];
                load_b_rows(bb, q + np * 16 * kLd + kk * 16, kLd);
                mma(s[2 * np], ka, bb);
                mma(s[2 * np + 1], ka, bb + 2);
                load_b_rows(bb, d_o + np * 16 * kLd + kk * 16, kLd);
                mma(dp[2 * np], va, bb);
                mma(dp[2 * np + 1], va, bb + 2);
            }
        }
        // Masked: queries i < j (only where the block crosses the warp's keys) and i >= T.
        const bool need_mask = q0 < jw + 15 || q0 + kRows > T_;
        for (int n = 0; n < kNS; n++)
            for (int e = 0; e < 4; e++) {
                const int qi = n * 8 + 2 * t4 + (e % 2), i = q0 + qi, j = jw + g + 8 * (e / 2);
                float p = 0.0f, ds = 0.0f;
                if (!need_mask || (i < T_ && i >= j)) {
                    p = exp2f(s[n][e] * sl2 - ls[qi]);
                    ds = p * (dp[n][e] - ds_[qi]);
                }
                s[n][e] = p;
                dp[n][e] = ds;
            }
        for (int n = 0; n < kNS; n++)  // dS^T rows of the warp's keys, bf16 pairs
            for (int r = 0; r < 2; r++)
                *reinterpret_cast<uint32_t*>(dss + (warp * 16 + g + 8 * r) * kLdS + n * 8 + 2 * t4) =
                    ptx::pack_bf16x2(dp[n][2 * r], dp[n][2 * r + 1]);
        if (live)
        for (int kk = 0; kk < kRows / 16; kk++) {
            uint32_t pa[4], da[4];
            acc_to_a(pa, s[2 * kk], s[2 * kk + 1]);
            acc_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
            for (int np = 0; np < kND / 2; np++) {
                uint32_t bb[4];
                load_b_cols(bb, d_o + kk * 16 * kLd + np * 16, kLd);
                mma(dv[2 * np], pa, bb);
                mma(dv[2 * np + 1], pa, bb + 2);
                load_b_cols(bb, q + kk * 16 * kLd + np * 16, kLd);
                mma(dk[2 * np], da, bb);
                mma(dk[2 * np + 1], da, bb + 2);
            }
        }
        __syncthreads();  // dS^T complete; this stage's Q and dO no longer read
        {  // dQ partial of this key block: dS (kRows x kKeys) K; warp: m16 tile qt, columns d0 ..
            const int qt = warp % kQT, d0 = (warp / kQT) * kDq;
            float dq[kDq / 8][4];
            for (int n = 0; n < kDq / 8; n++)
                for (int e = 0; e < 4; e++) dq[n][e] = 0.0f;
            for (int kk = 0; kk < kKeys / 16; kk++) {
                uint32_t a[4];
                load_a_trans(a, dss + kk * 16 * kLdS + qt * 16, kLdS);
                for (int np = 0; np < kDq / 16; np++) {
                    uint32_t bb[4];
                    load_b_cols(bb, ks + kk * 16 * kLd + d0 + np * 16, kLd);
                    mma(dq[2 * np], a, bb);
                    mma(dq[2 * np + 1], a, bb + 2);
                }
            }
            // Rows [j0, T) of key block kb, after the rows of blocks 0 .. kb-1.
            const size_t row0 = (static_cast<size_t>(z) * NH + h) * dq_partial_rows<KEYS>(T_) +
                                dq_partial_first<KEYS>(T_, kb);
            float* part = dq_part + row0 * HS;
            for (int r = 0; r < 2; r++) {
                const int i = q0 + qt * 16 + g + 8 * r;
                if (i >= T_) continue;
                float* row = part + static_cast<size_t>(i - j0) * HS + d0 + 2 * t4;
                for (int n = 0; n < kDq / 8; n++)
                    *reinterpret_cast<float2*>(row + n * 8) = make_float2(dq[n][2 * r], dq[n][2 * r + 1]);
            }
        }
    }
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    for (int r = 0; r < 2; r++) {
        const int j = jw + g + 8 * r;
        if (j >= T_) continue;
        bf16* krow = dqkv + (static_cast<size_t>(b) * T_ + j) * stride + C + gkv * HS + 2 * t4;
        bf16* vrow = krow + static_cast<size_t>(NKV) * HS;
        for (int n = 0; n < kND; n++) {
            *reinterpret_cast<uint32_t*>(krow + n * 8) = ptx::pack_bf16x2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
            *reinterpret_cast<uint32_t*>(vrow + n * 8) = ptx::pack_bf16x2(dv[n][2 * r], dv[n][2 * r + 1]);
        }
    }
}

/// dQ row i of (b, h) = (1/sqrt(HS)) x the sum of its key blocks' partials (KEYS keys per block,
/// the fused kernel's), kb = 0 .. i/KEYS in that order (deterministic), as bf16 into dqkv. One
/// thread per 8 columns of a row. grid (ceil(T*HS/8 / 256), NH, batch rows of the chunk), block
/// 256; batch row b0 + blockIdx.z.
template <int HS, int KEYS>
__global__ void flash_dq_reduce_kernel(bf16* dqkv, const float* dq_part, int T_, int C, int NH, int NKV, int b0) {
    constexpr int kChunks = HS / 8;
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= T_ * kChunks) return;
    const int b = b0 + blockIdx.z, h = blockIdx.y, i = x / kChunks, d = (x % kChunks) * 8;
    constexpr int kKeys = KEYS;
    const float* part = dq_part + (static_cast<size_t>(blockIdx.z) * NH + h) * dq_partial_rows<KEYS>(T_) * HS + d;
    float acc[8] = {};
    size_t first = 0;  // the first row of key block kb
    for (int kb = 0; kb <= i / kKeys; kb++) {
        const float* p = part + (first + i - kb * kKeys) * HS;
        const float4 lo = *reinterpret_cast<const float4*>(p), hi = *reinterpret_cast<const float4*>(p + 4);
        acc[0] += lo.x, acc[1] += lo.y, acc[2] += lo.z, acc[3] += lo.w;
        acc[4] += hi.x, acc[5] += hi.y, acc[6] += hi.z, acc[7] += hi.w;
        first += T_ - kb * kKeys;
    }
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    Pack<bf16> res;
    for (int e = 0; e < 8; e++) res.v[e] = __float2bfloat16(acc[e] * scale);
    const size_t stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    store_pack(dqkv + (static_cast<size_t>(b) * T_ + i) * stride + h * HS + d, res);
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

/// Launches kernel (kThreads threads a block) with smem bytes of dynamic shared memory (above the
/// default 48 KiB: opted in).
template <int kThreads, typename... P, typename... A>
static void launch_flash(void (*kernel)(P...), dim3 grid, size_t smem, cudaStream_t stream, A... args) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch(kernel, grid, dim3(kThreads), smem, stream, args...);
}

template <int HS>
static void flash_forward(bf16* out, float* lse, const bf16* qkv, int B, int T_, int C, int NH, int NKV,
                          cudaStream_t stream) {
    launch_flash<kFwdThreads<HS>>(flash_forward_kernel<HS>, dim3(NH, ceil_div(T_, flash_forward_rows(HS)), B),
                 flash_forward_smem_bytes(HS), stream, out, lse, qkv, T_, C, NH, NKV);
}

/// The fused backward with KEYS keys per block and its dQ sum, per batch chunk. scratch: D, then
/// (from the next 256 bytes) the partials of flash_backward_batch_chunk(.., KEYS) batch rows.
template <int HS, int KEYS>
static void flash_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, float* scratch, int B,
                           int T_, int C, int NH, int NKV, cudaStream_t stream) {
    const size_t delta_floats = (static_cast<size_t>(B) * NH * T_ * sizeof(float) + 255) / 256 * 256 / sizeof(float);
    float* dq_part = scratch + delta_floats;
    const int chunk = flash_backward_batch_chunk(B, T_, C, NH, KEYS);  // batch rows whose partials fit
    constexpr int kBlock = 256;
    for (int b0 = 0; b0 < B; b0 += chunk) {  // each chunk's sum reads its partials before the next overwrites them
        const int nb = std::min(chunk, B - b0);
        launch_flash<kBwdThreads<KEYS>>(flash_backward_kernel<HS, KEYS>, dim3(NKV * nb, ceil_div(T_, KEYS)),
                                        flash_backward_smem_bytes(HS, KEYS), stream, dqkv, dq_part, dout, qkv,
                                        static_cast<const float*>(lse), static_cast<const float*>(scratch), T_, C, NH,
                                        NKV, b0);
        launch(flash_dq_reduce_kernel<HS, KEYS>, dim3(ceil_div(T_ * (HS / 8), kBlock), NH, nb), dim3(kBlock), 0,
               stream, dqkv, static_cast<const float*>(dq_part), T_, C, NH, NKV, b0);
    }
}

/// The current device's cudaDevAttrMaxSharedMemoryPerBlockOptin.
static int device_smem_optin() {
    int device = 0, smem_optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return smem_optin;
}

int flash_backward_keys_on_device(int head_size) { return flash_backward_keys(head_size, device_smem_optin()); }

void flash_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T_, int C, int NH, int NKV,
                             cudaStream_t stream) {
    check_flash(C, NH, NKV, {out, qkv});
    if (C / NH == 64) flash_forward<64>(out, lse, qkv, B, T_, C, NH, NKV, stream);
    else flash_forward<128>(out, lse, qkv, B, T_, C, NH, NKV, stream);
}

/// D, then the fused backward and its dQ sum with `keys` keys per block (validated by the callers).
static void run_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse, int B,
                         int T_, int C, int NH, int NKV, int keys, float* scratch, cudaStream_t stream) {
    attention_delta(scratch, dout, out, B, T_, C, NH, stream);
    if (C / NH == 64) flash_backward<64, 128>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream);
    else if (keys == 128) flash_backward<128, 128>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream);
    else flash_backward<128, 64>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream);
}

void flash_attention_backward_keys(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                                   int B, int T_, int C, int NH, int NKV, int keys, float* scratch,
                                   cudaStream_t stream) {
    check_flash(C, NH, NKV, {dqkv, dout, qkv, out, scratch});
    const int hs = C / NH;
    const std::string what = "cuda flash attention backward: keys " + std::to_string(keys);
    if (keys != 64 && keys != kFlashBackwardKeysMax)
        throw std::invalid_argument(what + " per block must be 64 or 128");
    static_assert(flash_backward_keys_min(64) == 128 && flash_backward_keys_min(128) == 64);
    if (keys < flash_backward_keys_min(hs))
        throw std::invalid_argument(what + " at head size " + std::to_string(hs) +
                                    ": this head size has the 128-key variant only");
    const size_t need = flash_backward_smem_bytes(hs, keys);
    const int optin = device_smem_optin();
    if (static_cast<long long>(need) > optin)
        throw std::invalid_argument(what + " at head size " + std::to_string(hs) + " needs " + std::to_string(need) +
                                    " B of shared memory per block; the device allows " + std::to_string(optin));
    run_backward(dqkv, dout, qkv, out, lse, B, T_, C, NH, NKV, keys, scratch, stream);
}

void flash_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse, int B,
                              int T_, int C, int NH, int NKV, float* scratch, cudaStream_t stream) {
    check_flash(C, NH, NKV, {dqkv, dout, qkv, out, scratch});
    // The device's variant (a host-side attribute lookup, no synchronization), valid by construction:
    // the same at every call of a run, so the same bits. scratch: CudaOps sizes it for this variant.
    run_backward(dqkv, dout, qkv, out, lse, B, T_, C, NH, NKV, flash_backward_keys_on_device(C / NH), scratch, stream);
}

}  // namespace llmtrain::cuda
