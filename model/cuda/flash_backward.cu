// model/cuda/flash_backward.cu — the backward of causal multi-head and grouped-query attention
// in bf16 on tensor cores: FlashAttention-2's Algorithm 2, fused (Tri Dao, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning", 2023), on the PTX primitives of
// model/cuda/ptx.cuh (mma.sync m16n8k16 with ldmatrix operands, cp.async double buffering), and the
// deterministic sum of its dQ partials. The forward is flash_forward.cu; the layout, fragments and
// shared tiles are flash_tiles.cuh. Our own code from the paper and the PTX ISA.
//
// D = rowsum(dO o O) first (attention.cu's delta kernel). One block per key block of key/value head
// g — the tile's keys, 128 (8 warps x 16) or 64 (4 warps; flash_backward_tile, flash_attention.hpp)
// — holds K and V in shared memory and dK, dV in registers, and walks its group's query heads in
// order and, per head, the query blocks (the tile's rows: 128 or 64 at HS 64, 64 or 32 at HS 128)
// from its diagonal to T, Q, dO, lse and D double-buffered. Per query block each warp computes
// S^T = K_w Q^T and dP^T = V_w dO^T (16 keys x the block's queries), P^T = exp2(S^T log2e/sqrt(HS) -
// lse log2e), dS^T = P^T o (dP^T - D), then dV += P^T dO and dK += dS^T Q with P^T, dS^T as A
// fragments straight from the accumulators. dS^T goes to shared memory (bf16); after a barrier the
// warps compute this key block's dQ partial, dS K (A fragments of dS by ldmatrix.trans of dS^T),
// and store it in fp32 to the workspace: (b, h, key block kb, query row i >= kb x the block's keys),
// staged through the step's dead Q/dO stage so that each lane stores 16 bytes (flash_dq_stage_slot).
// A second kernel sums each dQ row's partials in key-block order, scales by 1/sqrt(HS) and writes
// bf16: no atomics, every sum in a fixed order, the same bits every run. dK (scaled) and dV are
// written once at the end, through the warp's own rows of K and V, 16 bytes a lane. The workspace
// stays within flash_dq_workspace_cap (256 MiB) at any T: it holds the partials of as many batch
// rows as fit, larger batches running as several (fused kernel, sum) pairs in stream order on the
// same workspace; where one row does not fit, each pair covers one query head of each group of a
// few key/value heads over a range of query rows, dK and dV carried in fp32 between the pairs
// (flash_backward_row_split). P and dS enter the mma rounded to bf16, as in
// FlashAttention-2 and cuDNN (the error bound of tests/cuda/attention_bound.hpp).
// Rows past T are zero-filled by cp.async (src-size 0) and masked where they would contribute.
// Document masking (doc non-null, Ops::attention_backward_doc's doc_start (B,T) int32): a key block's
// walk ends at the first query whose document starts after the block's last key (query blocks
// past it are skipped), a warp whose keys all precede the step's first row's document is not live,
// elements with j < doc[i] are masked, and the dQ sum of row i starts at key block doc[i] / KEYS
// (the partials of earlier blocks are never written). It runs the small tile, whatever the device's
// (flash_backward_tile_small: the large tiles, at 255 registers, spill with the mask's four), so
// its scratch is flash_attention_backward_scratch_bytes(.., flash_backward_tile_small(HS).keys).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "model/cuda/flash_tiles.cuh"

namespace llmtrain::cuda {

template <int KEYS>
constexpr int kBwdThreads = flash_backward_warps(KEYS) * kWarpSize;  ///< 256 for 128 keys, 128 for 64
template <int HS, int KEYS, int ROWS>
constexpr size_t kBwdSmem = flash_backward_smem_bytes(HS, {KEYS, ROWS});  ///< flash_attention.hpp

/// The part of the backward one launch covers (flash_attention.hpp "the backward's dQ
/// workspace"): batch rows b0 .., key/value heads g0 .. g0 + ng - 1 and of each group's query heads
/// the offsets r0 .. r1 - 1, query rows [qa, qb) (qa a multiple of the block's keys). carry: the
/// dK/dV accumulators of every key block of the ng heads in fp32 between launches (row chunks), or
/// null when the launch covers every query of the group (batch chunks: {b0, 0, NKV, 0, group, 0, T}).
struct BwdPart {
    int b0, g0, ng, r0, r1, qa, qb;
    float* carry;
};

/// The piece flash_dq_stage_slot names (flash_attention.hpp), in the stage whose Q tile is at q
/// (its dO tile two Q stages further: the kernel's layout).
template <int HS, int kRows, int kThreads>
__device__ inline float* dq_stage_piece(bf16* q, int warp, int rr, int p) {
    const FlashStagePiece s = flash_dq_stage_slot<HS, kRows, kThreads>(warp, rr, p);
    return reinterpret_cast<float*>(q + (s.tile * 2 * kRows + s.row) * kTileLd<HS> + s.piece * 8);
}

/// Backward, Algorithm 2, fused: dK and dV of key block kb = blockIdx.y (KEYS keys, 16 per warp)
/// of key/value head g = blockIdx.x % NKV (summed over its query heads g*NH/NKV .. in order) of the
/// chunk's batch row z = blockIdx.x / NKV, and that key block's dQ partials, ROWS query rows a
/// step. grid (NKV x batch rows of the chunk, ceil(T/KEYS)): x varies fastest, so every head's key
/// block 0 (the most query blocks) starts first, longest first over the whole grid. Batch row
/// b = b0 + z. delta: D (B,NH,T); dq_part: the chunk's partials, flash_dq_partial_rows(T, KEYS) rows
/// of HS floats per (z, h). In row chunks (part.carry set) the grid is (part.ng, ceil(qb/KEYS)):
/// the block walks query heads r0 .. r1 - 1 of its group over rows [max(j0, qa), qb), its partials
/// flash_dq_chunk_rows(KEYS, qa, qb) rows per (z, head), and takes dK/dV from the carry unless this
/// is their first launch, leaves them there unless it is their last: the walk of every key block
/// is the same sequence of steps in any chunking, so the same bits. Dynamic smem flash_backward_smem_bytes(HS, {KEYS, ROWS}): K and V (KEYS
/// x (HS + 8) bf16 each), two stages of Q and dO (ROWS x (HS + 8) bf16 each) and of lse and D (ROWS
/// fp32), dS^T (KEYS x (ROWS + 8) bf16). The tiles (flash_attention.hpp; flash_backward_tile picks
/// one per device, flash_attention_backward_tiled runs either, for benchmarks):
/// - HS 64, 128 x 128 (large): 256 threads, smem 2 x 128 x 72 x 2 + 4 x 128 x 72 x 2 + 128 x 136 x 2
///   + 2,048 = 147,456 B. FlashAttention-2's tile at head size 64 where 144 KiB fit.
/// - HS 64, 128 x 64 (small): 256 threads, 2 x 128 x 72 x 2 + 4 x 64 x 72 x 2 + 128 x 72 x 2 + 1,024
///   = 93,184 B.
/// - HS 128, 128 x 64 (large): 256 threads, 2 x 128 x 136 x 2 + 4 x 64 x 136 x 2 + 128 x 72 x 2 +
///   1,024 = 158,720 B. FlashAttention-2's tile at head size 128 where 144 KiB fit. Against 64
///   keys half the dQ partials (written once here, read once by the sum: at B 8, T 2048 with 12
///   heads, the shape measured on an H200, 1.66 GB each way per backward, ~0.7 ms of HBM traffic
///   at 4.8 TB/s, become 0.86 GB) and each Q/dO tile copied serves 128 keys instead of 64.
/// - HS 128, 64 x 32 (small): 128 threads (4 warps), 2 x 64 x 136 x 2 + 4 x 32 x 136 x 2 + 64 x 40 x 2
///   + 512 = 75,264 B: the 99 KiB of sm_86/89/120.
/// Per step a warp computes a 16-key x ROWS slice of S^T and dP^T: in the large tiles 64 + 64
/// accumulator registers beside dK and dV's 64 (HS 64: 32 + 32) or 128 (HS 128, where ROWS is
/// halved to keep the 192), each K/V A fragment read feeding ROWS / 8 mma, two barriers a step.
/// Occupancy: at ~240-255 registers a thread (255 allowed by __launch_bounds__(threads, 1)), a
/// 256-thread block holds an SM's 64K registers and a 128-thread block half of them: 8 warps per SM
/// in every tile (1 block of 8 or 2 of 4).
template <int HS, int KEYS, int ROWS, bool DOC>
__global__ void __launch_bounds__(kBwdThreads<KEYS>, 1)
    flash_backward_kernel(bf16* dqkv, float* dq_part, const bf16* dout, const bf16* qkv, const float* lse,
                          const float* delta, int T_, int C, int NH, int NKV, BwdPart part, const int* doc) {
    constexpr int kRows = ROWS;  // queries per step
    constexpr int kKeys = KEYS, kThreads = kBwdThreads<KEYS>, kWarps = kThreads / kWarpSize;
    constexpr int kLd = kTileLd<HS>, kLdS = kRows + 8;
    constexpr int kKS = HS / 16, kNS = kRows / 8, kND = HS / 8;
    constexpr int kQT = kRows / 16;         // m16 tiles of a query block (dQ: one per warp) ...
    constexpr int kDq = HS / (kWarps / kQT);  // ... and the dQ columns of a warp
    static_assert(kWarps % kQT == 0 && kDq % 16 == 0 && kKeys == 16 * kWarps);
    static_assert(2 * (2 * kKeys * kLd + 4 * kRows * kLd + kKeys * kLdS) + 4 * 4 * kRows == kBwdSmem<HS, KEYS, ROWS>);
    EXTERN_SHARED(bf16, ks);  // the layout: K, V, the stages of Q and dO, dS^T, the stages of lse and D
    bf16* vs = ks + kKeys * kLd;
    bf16* qs = vs + kKeys * kLd;        // stage s at qs + s * kRows * kLd
    bf16* dos = qs + 2 * kRows * kLd;   // likewise
    bf16* dss = dos + 2 * kRows * kLd;  // dS^T (kKeys x kLdS)
    float* lses = reinterpret_cast<float*>(dss + kKeys * kLdS);  // stage s: lse * log2e at lses + s * kRows
    float* dels = lses + 2 * kRows;                               // stage s: D
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t4 = lane % 4;
    const int z = blockIdx.x / part.ng, gl = blockIdx.x % part.ng, b = part.b0 + z, gkv = part.g0 + gl;
    const int kb = blockIdx.y, j0 = kb * kKeys, jw = j0 + warp * 16;
    const int group = NH / NKV, h0 = gkv * group;
    const size_t stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    const bf16* xb = qkv + static_cast<size_t>(b) * T_ * stride;
    const int q_first = j0 > part.qa ? j0 : part.qa;  // the first query row of each head's walk
    // Documents: the queries that see key j are j .. lim(j) - 1, lim(j) the first query whose
    // document starts after j (T without documents; doc is nondecreasing along t: a binary search).
    // The walk stops at lim of the block's last key; the lane's two keys jw + g, jw + g + 8 keep
    // their lim (2 registers: the element mask compares indices only, as the causal one), and the
    // warp's smallest, lim(jw), picks the masked softmax as T does without documents.
    // DOC = false (no documents) makes every lim T_ at compile time: the causal kernel's registers.
    const int* dr = DOC ? doc + static_cast<size_t>(b) * T_ : nullptr;  // row b's document starts
    auto lim = [&](int j) {
        if (!DOC || j >= T_) return T_;
        int lo = j, hi = T_;
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (dr[mid] > j) hi = mid;
            else lo = mid + 1;
        }
        return lo;
    };
    const int q_stop = min(part.qb, lim(min(j0 + kKeys, T_) - 1));  // the walk's end
    const int lim_r0 = lim(jw + g), lim_r1 = lim(jw + g + 8), lim_w = lim(jw);
    const int nqb = q_stop > q_first ? ceil_div(q_stop - q_first, kRows) : 0;  // query blocks (q0 = q_first, + kRows, ..)
    const int nr = part.r1 - part.r0, n_it = nr * nqb;
    static_assert(kRows <= kThreads);
    // A step's query head and first row: (h0 + r0, q_first), (h0 + r0, q_first + kRows), .. below qb, then the
    // group's next head. Advanced by next(), not divided out of the step index (three integer divisions a
    // step in SASS).
    struct Pos {
        int h, q0;
    };
    auto next = [&](Pos p) {
        p.q0 += kRows;
        if (p.q0 >= q_stop) p.q0 = q_first, p.h++;
        return p;
    };
    // Queues the Q and dO of the step at p (cp.async) into stage st.
    auto issue = [&](Pos p, int st) {
        copy_rows<HS, kRows, kThreads>(qs + st * kRows * kLd, xb + p.h * HS, stride, p.q0, T_);
        copy_rows<HS, kRows, kThreads>(dos + st * kRows * kLd, dout + static_cast<size_t>(b) * T_ * C + p.h * HS, C,
                                       p.q0, T_);
    };
    // The lse and D of query row p.q0 + threadIdx.x (thread < kRows), read into registers one step
    // before they go to shared memory, so no step waits on these global loads (0 past T and past
    // the launch's last head: no such step).
    auto load_stats = [&](Pos p, float& l_, float& d_) {
        l_ = d_ = 0.0f;
        if (threadIdx.x >= kRows || p.h >= h0 + part.r1) return;
        const int i = p.q0 + static_cast<int>(threadIdx.x);
        if (i >= T_) return;
        const size_t stat = (static_cast<size_t>(b) * NH + p.h) * T_ + i;
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
    Pos cur{h0 + part.r0, q_first}, ahead = next(cur), far = next(ahead);  // steps it, it + 1, it + 2
    issue(cur, 0);
    ptx::cp_async_commit();
    float pre_l, pre_d;  // the stats of the next step, in flight
    load_stats(cur, pre_l, pre_d);
    put_stats(0, pre_l, pre_d);
    load_stats(ahead, pre_l, pre_d);
    const float sl2 = kLog2e / sqrtf(static_cast<float>(HS));
    float dk[kND][4], dv[kND][4];
    // Row chunks: this block's carry, dK then dV, element (n, e) of thread t at (n*4 + e) x threads + t.
    float* carry = part.carry == nullptr ? nullptr
                                         : part.carry + ((static_cast<size_t>(z) * part.ng + gl) * ceil_div(T_, kKeys) + kb) *
                                                            (2 * kKeys * HS);
    const bool carried = carry != nullptr && (part.r0 > 0 || j0 < part.qa);  // an earlier launch began dK, dV
    const bool last = carry == nullptr || (part.r1 == group && part.qb == T_);
    for (int n = 0; n < kND; n++)
        for (int e = 0; e < 4; e++) {
            const size_t c = (n * 4 + e) * kThreads + threadIdx.x;
            dk[n][e] = carried ? carry[c] : 0.0f;
            dv[n][e] = carried ? carry[kND * 4 * kThreads + c] : 0.0f;
        }
    for (int it = 0; it < n_it; it++, cur = ahead, ahead = far, far = next(far)) {
        const int st = it % 2, h = cur.h, q0 = cur.q0;
        if (it + 1 < n_it) {  // the other stage's last readers passed the previous step's middle barrier
            issue(ahead, st ^ 1);
            ptx::cp_async_commit();
            put_stats(st ^ 1, pre_l, pre_d);  // loaded during step it - 1
            load_stats(far, pre_l, pre_d);
            ptx::cp_async_wait<1>();
        } else {
            ptx::cp_async_wait<0>();
        }
        __syncthreads();  // step it's stage (and, at it = 0, K and V) visible to every warp
        const bf16* q = qs + st * kRows * kLd;
        const bf16* d_o = dos + st * kRows * kLd;
        const float* ls = lses + st * kRows;
        const float* ds_ = dels + st * kRows;
        // Warp-uniform: some key of the warp is < T and <= the step's last query. Else P^T = dS^T = 0
        // and the warp only writes its zero rows of dS^T (a key block's first step when ROWS <
        // KEYS: warps 4-7 of 128 keys against 64 rows, warps 2-3 of 64 keys against 32). S^T and
        // dP^T live only in the live branch (zeroing them for both was 32 register moves a step in
        // SASS).
        const bool live = jw < T_ && jw <= q0 + kRows - 1;
        // This lane's bf16 pair of dS^T: row g + 8r of the warp's keys, query columns n*8 + 2t4, + 1.
        auto dst_pair = [&](int n, int r) {
            return reinterpret_cast<uint32_t*>(dss + (warp * 16 + g + 8 * r) * kLdS + n * 8 + 2 * t4);
        };
        if (!live) {
            for (int n = 0; n < kNS; n++)
                for (int r = 0; r < 2; r++) *dst_pair(n, r) = 0u;
        } else {
            float s[kNS][4], dp[kNS][4];  // S^T and dP^T: 16 keys (rows g, g + 8) x kRows queries
            for (int n = 0; n < kNS; n++)
                for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
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
            // P^T and dS^T in place of S^T and dP^T, without a branch per element (one kept each
            // element's stats loads and exp2 behind its own condition, serialized: SASS showed a
            // BSSY/BSYNC pair each). Masked to 0: queries i < j and i >= T, checked only in the steps
            // that cross the warp's keys or T (a warp-uniform branch between two copies of the loop;
            // masked elements are finite, rows past T being zeros with lse and D 0, and only the
            // select sees them).
            auto softmax = [&](auto masked) {
                for (int n = 0; n < kNS; n++) {
                    const int qi = n * 8 + 2 * t4;  // this lane's two query columns qi, qi + 1
                    const float2 l2 = *reinterpret_cast<const float2*>(ls + qi);
                    const float2 d2 = *reinterpret_cast<const float2*>(ds_ + qi);
                    for (int e = 0; e < 4; e++) {
                        const float p = ptx::ex2_approx(fmaf(s[n][e], sl2, -(e % 2 ? l2.y : l2.x)));
                        const float ds = p * (dp[n][e] - (e % 2 ? d2.y : d2.x));
                        bool keep = true;
                        if constexpr (decltype(masked)::value) {
                            const int i = q0 + qi + (e % 2), j = jw + g + 8 * (e / 2);
                            keep = i < (e / 2 ? lim_r1 : lim_r0) && i >= j;  // T_ without documents
                        }
                        s[n][e] = keep ? p : 0.0f;
                        dp[n][e] = keep ? ds : 0.0f;
                    }
                }
            };
            if (q0 < jw + 15 || q0 + kRows > lim_w) softmax(std::true_type{});
            else softmax(std::false_type{});
            for (int n = 0; n < kNS; n++)  // dS^T rows of the warp's keys
                for (int r = 0; r < 2; r++) *dst_pair(n, r) = ptx::pack_bf16x2(dp[n][2 * r], dp[n][2 * r + 1]);
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
            // Rows [q_first, qb) of key block kb, after the rows of blocks 0 .. kb-1, in the slot of (z, this
            // launch's head gl, offset h - h0 - r0); the warp's 16 x kDq tile goes out through this
            // stage's dead rows that only its own threads copy into, 16 bytes a lane.
            const size_t slot = (static_cast<size_t>(z) * part.ng + gl) * nr + (h - h0 - part.r0);
            const size_t row0 = slot * flash_dq_chunk_rows(kKeys, part.qa, part.qb) +
                                flash_dq_rows_before(kb, kKeys, part.qa, part.qb);
            float* dst = dq_part + row0 * HS + d0;
            bf16* stage = qs + st * kRows * kLd;
            // The lane read afresh (asm volatile): the staging addresses are computed here each step,
            // not hoisted out of the loop into registers the GEMMs above need (ptxas spilled).
            const int ln = ptx::lane_id(), lg = ln / 4, lt = ln % 4;
            for (int n = 0; n < kDq / 8; n++)
                for (int r = 0; r < 2; r++)  // this lane's pair: piece 2n + lt/2 of row lg + 8r, its half lt % 2
                    *reinterpret_cast<float2*>(dq_stage_piece<HS, kRows, kThreads>(stage, warp, lg + 8 * r, 2 * n + lt / 2) +
                                               2 * (lt % 2)) = make_float2(dq[n][2 * r], dq[n][2 * r + 1]);
            __syncwarp();
            constexpr int kPieces = kDq / 4;  // 16-byte pieces of a dQ row of the warp
            NO_UNROLL  // unrolled (by 2 or more), ptxas spilled 48 bytes on sm_80 at head size 64
            for (int c = ln; c < 16 * kPieces; c += kWarpSize) {
                const int rr = c / kPieces, p = c % kPieces, i = q0 + qt * 16 + rr;
                const float4 v = *reinterpret_cast<const float4*>(
                    dq_stage_piece<HS, kRows, kThreads>(stage, warp, rr, p));
                if (i < T_) *reinterpret_cast<float4*>(dst + static_cast<size_t>(i - q_first) * HS + 4 * p) = v;
            }
            __syncwarp();  // every lane's reads before any lane's next copy into these rows
        }
    }
    // With documents a row chunk's launch may hold no query this key block sees (n_it = 0): the K, V
    // and first Q/dO copies issued above must land before the block exits or reuses K's rows.
    if (n_it == 0) ptx::cp_async_wait<0>();
    if (!last) {  // a later launch goes on from here
        for (int n = 0; n < kND; n++)
            for (int e = 0; e < 4; e++) {
                const size_t c = (n * 4 + e) * kThreads + threadIdx.x;
                carry[c] = dk[n][e];
                carry[kND * 4 * kThreads + c] = dv[n][e];
            }
        return;
    }
    // dK (scaled) and dV leave through the warp's own rows of K and V, 16 bytes a lane (straight
    // from the accumulators, a 4-byte store instruction wrote 16 bytes into each of 8 rows).
    __syncthreads();  // every warp's last dQ GEMM has read K
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    bf16* kst = ks + warp * 16 * kLd;
    bf16* vst = vs + warp * 16 * kLd;
    for (int r = 0; r < 2; r++)
        for (int n = 0; n < kND; n++) {
            const int o = (g + 8 * r) * kLd + n * 8 + 2 * t4;
            *reinterpret_cast<uint32_t*>(kst + o) = ptx::pack_bf16x2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
            *reinterpret_cast<uint32_t*>(vst + o) = ptx::pack_bf16x2(dv[n][2 * r], dv[n][2 * r + 1]);
        }
    __syncwarp();
    constexpr int kChunks = HS / 8;  // 16-byte pieces of a row
    for (int c = lane; c < 16 * kChunks; c += kWarpSize) {
        const int rr = c / kChunks, p = c % kChunks, j = jw + rr;
        if (j >= T_) continue;
        bf16* krow = dqkv + (static_cast<size_t>(b) * T_ + j) * stride + C + gkv * HS + 8 * p;
        *reinterpret_cast<uint4*>(krow) = *reinterpret_cast<const uint4*>(kst + rr * kLd + 8 * p);
        *reinterpret_cast<uint4*>(krow + static_cast<size_t>(NKV) * HS) =
            *reinterpret_cast<const uint4*>(vst + rr * kLd + 8 * p);
    }
}

/// dQ row i of (b, h) = (1/sqrt(HS)) x the sum of its key blocks' partials (KEYS keys per block,
/// the fused kernel's), kb = 0 .. i/KEYS in that order (deterministic), as bf16 into dqkv, for the
/// rows [qa, qb) and heads of the fused launch `part` (its partial layout). One thread per 8 columns
/// of a row. grid (ceil((qb - qa)*HS/8 / 256), ng x (r1 - r0) heads, batch rows of the chunk),
/// block 256; batch row b0 + blockIdx.z.
template <int HS, int KEYS>
__global__ void flash_dq_reduce_kernel(bf16* dqkv, const float* dq_part, int T_, int C, int NH, int NKV, BwdPart part,
                                       const int* doc) {
    constexpr int kChunks = HS / 8;
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= (part.qb - part.qa) * kChunks) return;
    const int nr = part.r1 - part.r0, group = NH / NKV;
    const int b = part.b0 + blockIdx.z, i = part.qa + x / kChunks, d = (x % kChunks) * 8;
    const int h = (part.g0 + static_cast<int>(blockIdx.y) / nr) * group + part.r0 + static_cast<int>(blockIdx.y) % nr;
    constexpr int kKeys = KEYS;
    const size_t slot = static_cast<size_t>(blockIdx.z) * part.ng * nr + blockIdx.y;
    const float* src = dq_part + slot * flash_dq_chunk_rows(kKeys, part.qa, part.qb) * HS + d;
    float acc[8] = {};
    size_t first = 0;  // the first row of key block kb
    const int kb_lo = doc == nullptr ? 0 : doc[static_cast<size_t>(b) * T_ + i] / kKeys;  // blocks before: no partial
    for (int kb = 0; kb <= i / kKeys; kb++) {
        const int from = kb * kKeys > part.qa ? kb * kKeys : part.qa;  // key block kb's first row here
        if (kb < kb_lo) {
            first += part.qb - from;
            continue;
        }
        const float* p = src + (first + i - from) * HS;
        const float4 lo = *reinterpret_cast<const float4*>(p), hi = *reinterpret_cast<const float4*>(p + 4);
        acc[0] += lo.x, acc[1] += lo.y, acc[2] += lo.z, acc[3] += lo.w;
        acc[4] += hi.x, acc[5] += hi.y, acc[6] += hi.z, acc[7] += hi.w;
        first += part.qb - from;
    }
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    Pack<bf16> res;
    for (int e = 0; e < 8; e++) res.v[e] = __float2bfloat16(acc[e] * scale);
    const size_t stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    store_pack(dqkv + (static_cast<size_t>(b) * T_ + i) * stride + h * HS + d, res);
}

/// Queues the fused kernel (tile KEYS x ROWS) over `part` and its dQ sum; nb batch rows.
template <int HS, int KEYS, int ROWS, bool DOC>
static void backward_part(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta,
                          float* dq_part, int nb, int T_, int C, int NH, int NKV, BwdPart part, cudaStream_t stream,
                          const int* doc) {
    constexpr int kBlock = 256;
    launch_flash<kBwdThreads<KEYS>>(flash_backward_kernel<HS, KEYS, ROWS, DOC>, dim3(part.ng * nb, ceil_div(part.qb, KEYS)),
                                    kBwdSmem<HS, KEYS, ROWS>, stream, dqkv, dq_part, dout, qkv, lse, delta, T_, C, NH,
                                    NKV, part, doc);
    launch(flash_dq_reduce_kernel<HS, KEYS>, dim3(ceil_div((part.qb - part.qa) * (HS / 8), kBlock),
                                                  part.ng * (part.r1 - part.r0), nb),
           dim3(kBlock), 0, stream, dqkv, static_cast<const float*>(dq_part), T_, C, NH, NKV, part, doc);
}

/// The fused backward with tile (KEYS, ROWS) and its dQ sum, in batch chunks while one batch row's
/// partials fit flash_dq_workspace_cap, else in row chunks (flash_backward_row_split), in stream
/// order on the same workspace: each sum reads its partials before the next launch overwrites
/// them. scratch: D, then (from the next 256 bytes) the dQ workspace: the partials of
/// flash_backward_batch_chunk(.., KEYS) batch rows, or the split's dK/dV carry and then the
/// partials of one query chunk.
template <int HS, int KEYS, int ROWS, bool DOC>
static void flash_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, float* scratch, int B,
                           int T_, int C, int NH, int NKV, cudaStream_t stream, const int* doc) {
    const size_t delta_floats = (static_cast<size_t>(B) * NH * T_ * sizeof(float) + 255) / 256 * 256 / sizeof(float);
    float* work = scratch + delta_floats;
    const int group = NH / NKV;
    if (!flash_backward_splits_rows(T_, C, NH, KEYS)) {
        const int chunk = flash_backward_batch_chunk(B, T_, C, NH, KEYS);  // batch rows whose partials fit
        for (int b0 = 0; b0 < B; b0 += chunk)
            backward_part<HS, KEYS, ROWS, DOC>(dqkv, dout, qkv, lse, scratch, work, std::min(chunk, B - b0), T_, C, NH, NKV,
                                          BwdPart{b0, 0, NKV, 0, group, 0, T_, nullptr}, stream, doc);
        return;
    }
    const FlashRowSplit split = flash_backward_row_split(T_, HS, NKV, KEYS);
    float* carry = work;
    float* dq_part = carry + split.kv_heads * flash_dkv_carry_bytes(T_, HS, KEYS) / sizeof(float);
    for (int b = 0; b < B; b++)
        for (int g0 = 0; g0 < NKV; g0 += split.kv_heads)
            for (int r = 0; r < group; r++)  // each key block's walk: query head by head, ..
                for (int qa = 0; qa < T_; qa += split.query_rows)  // .. query block by query block
                    backward_part<HS, KEYS, ROWS, DOC>(
                        dqkv, dout, qkv, lse, scratch, dq_part, 1, T_, C, NH, NKV,
                        BwdPart{b, g0, std::min(split.kv_heads, NKV - g0), r, r + 1, qa,
                                std::min(T_, qa + split.query_rows), carry},
                        stream, doc);
}

/// The current device's cudaDevAttrMaxSharedMemoryPerBlockOptin.
static int device_smem_optin() {
    int device = 0, smem_optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return smem_optin;
}

FlashBackwardTile flash_backward_tile_on_device(int head_size) {
    return flash_backward_tile(head_size, device_smem_optin());
}

/// D, then the fused backward and its dQ sum with the tile (the head size's large or small one:
/// validated by the callers).
static void run_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse, int B,
                         int T_, int C, int NH, int NKV, FlashBackwardTile tile, float* scratch, cudaStream_t stream,
                         const int* doc) {
    attention_delta(scratch, dout, out, B, T_, C, NH, stream);
    if (doc != nullptr) {  // documents: the small tile (the large ones spill with the mask's registers)
        if (C / NH == 64) flash_backward<64, 128, 64, true>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream, doc);
        else flash_backward<128, 64, 32, true>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream, doc);
        return;
    }
    const bool large = tile == flash_backward_tile_large(C / NH);
    if (C / NH == 64 && large) flash_backward<64, 128, 128, false>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream, doc);
    else if (C / NH == 64) flash_backward<64, 128, 64, false>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream, doc);
    else if (large) flash_backward<128, 128, 64, false>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream, doc);
    else flash_backward<128, 64, 32, false>(dqkv, dout, qkv, lse, scratch, B, T_, C, NH, NKV, stream, doc);
}

/// Throws std::invalid_argument naming the tile unless it is head size hs's large or small one.
static void check_tile(int hs, FlashBackwardTile tile) {
    if (tile != flash_backward_tile_large(hs) && tile != flash_backward_tile_small(hs))
        throw std::invalid_argument("cuda flash attention backward: tile of " + std::to_string(tile.keys) +
                                    " keys x " + std::to_string(tile.rows) + " rows is not one of head size " +
                                    std::to_string(hs) + "'s (flash_backward_tile_large/small)");
}

void flash_attention_backward_tiled(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                                    int B, int T_, int C, int NH, int NKV, FlashBackwardTile tile, float* scratch,
                                    cudaStream_t stream, const int* doc) {
    check_flash(T_, C, NH, NKV, {dqkv, dout, qkv, out, scratch});
    const int hs = C / NH;
    check_tile(hs, tile);
    const size_t need = flash_backward_smem_bytes(hs, tile);
    const int optin = device_smem_optin();
    if (static_cast<long long>(need) > optin)
        throw std::invalid_argument("cuda flash attention backward: the tile of " + std::to_string(tile.keys) +
                                    " keys x " + std::to_string(tile.rows) + " rows at head size " +
                                    std::to_string(hs) + " needs " + std::to_string(need) +
                                    " B of shared memory per block; the device allows " + std::to_string(optin));
    run_backward(dqkv, dout, qkv, out, lse, B, T_, C, NH, NKV, tile, scratch, stream, doc);
}

void flash_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse, int B,
                              int T_, int C, int NH, int NKV, FlashBackwardTile tile, float* scratch,
                              cudaStream_t stream, const int* doc) {
    check_flash(T_, C, NH, NKV, {dqkv, dout, qkv, out, scratch});
    check_tile(C / NH, tile);  // the device's tile, the caller's (CudaOps::flash_tile): no device lookup per call
    run_backward(dqkv, dout, qkv, out, lse, B, T_, C, NH, NKV, tile, scratch, stream, doc);
}

}  // namespace llmtrain::cuda
