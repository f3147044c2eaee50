// model/cuda/flash_forward.cu — the forward of causal multi-head and grouped-query attention in
// bf16 on tensor cores: FlashAttention-2's Algorithm 1 (Tri Dao, "FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning", 2023) on the PTX primitives of
// model/cuda/ptx.cuh (mma.sync m16n8k16, bf16 in, fp32 accumulate; operands by ldmatrix; tiles by
// cp.async). The path of model.attention = "native" in bf16 at head sizes 64 and 128; the backward
// is flash_backward.cu, the shared tiles and layout flash_tiles.cuh. Our own code from the paper
// and the PTX ISA.
//
// A block owns 128 query rows of one (b, h): 4 warps of 32 rows (two m16 tiles each), and walks the
// key blocks of 64 up to its diagonal. Per key block: S = Q K^T (mma), the online softmax in the
// log2 domain (m, l per row; O rescaled by exp2(m_old - m_new) when some max grew), P =
// exp2(S log2e/sqrt(HS) - m) rounded to bf16 into A fragments, O += P V with V's B fragments from
// ldmatrix.trans. The causal mask is applied only where the key block crosses a warp's rows;
// blocks entirely past a warp's rows are skipped by that warp; key blocks past the block's last
// row are never loaded.
// out = O / l, lse = m ln 2 + log l. Two pipelines around the same per-block math:
// - head size 64 (flash_forward_qreg_kernel): Q's fragments (32 registers) are loaded once and
//   kept; K and V are double-buffered (block kb + 1 copied while kb is used; Q's tile first fills
//   the second stage). 224 registers (sm_90), 36,864 B of shared memory: 2 blocks (8 warps) per SM.
// - head size 128 (flash_forward_qsmem_kernel): O alone is 128 registers a thread, so Q stays in
//   shared memory and its fragments are read again per key block, as in FlashAttention-2; K and V
//   have one buffer each, copied in FlashAttention-2's order: V of block kb while S = Q K^T runs, K
//   of block kb + 1 while the softmax and P V run. 69,632 B, so it fits the 99 KiB of sm_86/89/120
//   and two blocks fit every other SM. Against 8 warps of 16 rows (the kernel measured on an H200,
//   0.39 of cuDNN's TFLOP/s), each K and V fragment read from shared memory serves two m16 tiles:
//   ldmatrix traffic per mma 0.31 instead of 0.5 of a 512-byte x4 load (head size 64's is 0.25).
// Rows past T are zero-filled by cp.async (src-size 0) and masked where they would contribute.
// Document masking (doc non-null: Ops::attention_forward_doc's doc_start (B,T) int32): row i sees
// keys doc[b,i] <= j <= i only. The walk starts at the key block of the block's first row's
// document start (the blocks before it are never loaded: docs/attention.md "Document masking"
// counts them), a warp skips the blocks wholly before its first row's document, and the element
// mask of a block that crosses a warp's document starts sets those scores to -inf; a row whose
// keys in a block are all masked keeps m = -inf there and adds nothing (the softmax's m_use).
#include <cmath>

#include "model/cuda/flash_tiles.cuh"

namespace llmtrain::cuda {

constexpr int kKeys = flash_key_rows();   ///< 64 keys per forward step
constexpr int kFwdRows = flash_forward_rows();  ///< 128 query rows a block
constexpr int kFwdThreads = flash_forward_warps() * kWarpSize;  ///< 128
constexpr int kMT = kFwdRows / (16 * flash_forward_warps());  ///< m16 tiles per warp: 2
static_assert(kMT == 2 && kFwdRows == 2 * kKeys);

/// One warp's registers across the key blocks: O (its 32 rows x HS, fp32 accumulator tiles), the
/// running max m (log2 domain) and this lane's part of the sum l of rows g, g + 8 of each m16 tile.
template <int HS>
struct FwdAcc {
    float o[kMT][HS / 8][4];
    float m[kMT][2], l[kMT][2];
};

/// Where a block's rows and its head's q, k, v columns are. grid (NH, ceil(T / 128), B):
/// blockIdx.x = h varies fastest, so within a batch row every head's block of the last rows (the
/// most key blocks) starts before any shorter one: the grid ends on short blocks, a short tail.
struct FwdBlock {
    int b, h, i0, iw, n_kb;  // batch row, head, first row, the warp's first row, key blocks with a key <= the last row
    int kb0;                 // the first key block any row sees (0 without documents)
    int lo_w, hi_w;          // document starts of the warp's first and last row (0 without documents)
    const int* doc;          // batch row b's document starts (T_), or null
    size_t stride;           // elements between positions in qkv
    const bf16 *q, *k, *v;   // column 0 of head h's q and of its key/value head's k and v at position 0
    bool active;             // warp-uniform: the warp has a row < T
    /// Whether the warp computes key block k0 .. k0 + 63: active, not every key past its rows, and
    /// not every key before its first row's document.
    __device__ bool sees(int k0) const { return active && k0 <= iw + 16 * kMT - 1 && k0 + kKeys > lo_w; }
};
template <int HS>
__device__ __forceinline__ FwdBlock fwd_block(const bf16* qkv, int T_, int C, int NH, int NKV, const int* doc) {
    FwdBlock f;
    f.b = blockIdx.z;
    f.h = blockIdx.x;
    f.i0 = (gridDim.y - 1 - blockIdx.y) * kFwdRows;
    f.iw = f.i0 + static_cast<int>(threadIdx.x / kWarpSize) * 16 * kMT;
    f.n_kb = ceil_div(min(f.i0 + kFwdRows, T_), kKeys);
    f.stride = static_cast<size_t>(C) + 2 * static_cast<size_t>(NKV) * HS;
    const bf16* x = qkv + static_cast<size_t>(f.b) * T_ * f.stride;
    f.q = x + f.h * HS;
    f.k = x + C + (f.h / (NH / NKV)) * HS;
    f.v = f.k + static_cast<size_t>(NKV) * HS;
    f.active = f.iw < T_;
    f.doc = doc == nullptr ? nullptr : doc + static_cast<size_t>(f.b) * T_;
    f.kb0 = f.doc == nullptr ? 0 : f.doc[f.i0] / kKeys;
    f.lo_w = f.doc == nullptr || !f.active ? 0 : f.doc[f.iw];
    f.hi_w = f.doc == nullptr || !f.active ? 0 : f.doc[min(f.iw + 16 * kMT, T_) - 1];
    return f;
}

/// acc: O = 0, m = -inf, l = 0.
template <int HS>
__device__ __forceinline__ void fwd_init(FwdAcc<HS>& acc) {
    for (int mt = 0; mt < kMT; mt++) {
        for (int n = 0; n < HS / 8; n++)
            for (int e = 0; e < 4; e++) acc.o[mt][n][e] = 0.0f;
        for (int r = 0; r < 2; r++) {
            acc.m[mt][r] = -INFINITY;
            acc.l[mt][r] = 0.0f;
        }
    }
}

/// S = Q K^T of the warp's rows and one key block: s (two m16 tiles x 64 keys, fp32). qa(a, mt, kk)
/// puts Q's A fragment of tile mt, columns 16kk .. 16kk + 15, into a; ks is the block's K tile
/// (64 x flash_tile_ld(HS) bf16, shared memory).
template <int HS, typename QA>
__device__ __forceinline__ void fwd_scores(float (&s)[kMT][kKeys / 8][4], QA qa, const bf16* ks) {
    constexpr int kLd = kTileLd<HS>;
    for (int mt = 0; mt < kMT; mt++)
        for (int n = 0; n < kKeys / 8; n++)
            for (int e = 0; e < 4; e++) s[mt][n][e] = 0.0f;
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[kMT][4];
        for (int mt = 0; mt < kMT; mt++) qa(a[mt], mt, kk);
        for (int np = 0; np < kKeys / 16; np++) {
            uint32_t bb[4];
            load_b_rows(bb, ks + np * 16 * kLd + kk * 16, kLd);  // one K load, both m16 tiles
            for (int mt = 0; mt < kMT; mt++) {
                mma(s[mt][2 * np], a[mt], bb);
                mma(s[mt][2 * np + 1], a[mt], bb + 2);
            }
        }
    }
}

/// The online softmax of key block k0 .. k0 + 63 for the warp's rows iw .. iw + 31: s (the scores)
/// becomes P = exp2(s log2e/sqrt(HS) - m_new), 0 at keys past the row (and, with documents, before
/// the row's document); m, l updated, O rescaled by exp2(m_old - m_new) where some row of the warp
/// has a new max.
template <int HS>
__device__ __forceinline__ void fwd_softmax(float (&s)[kMT][kKeys / 8][4], FwdAcc<HS>& acc, int k0,
                                            const FwdBlock& f, int T_) {
    const int iw = f.iw;
    const int lane = threadIdx.x % kWarpSize, g = lane / 4, t4 = lane % 4;
    const float sl2 = kLog2e / sqrtf(static_cast<float>(HS));  // a constant of HS
    if (f.doc != nullptr && k0 < f.hi_w) {  // warp-uniform: some key of the block precedes some row's document
        for (int mt = 0; mt < kMT; mt++)
            for (int r = 0; r < 2; r++) {
                const int lo = f.doc[min(iw + mt * 16 + g + 8 * r, T_ - 1)] - k0 - 2 * t4;  // rows past T: any
                for (int n = 0; n < kKeys / 8; n++)
                    for (int c = 0; c < 2; c++)
                        if (n * 8 + c < lo) s[mt][n][2 * r + c] = -INFINITY;
            }
    }
    if (k0 + kKeys - 1 > iw) {  // some key of the block lies past some row of the warp: mask it
        // Key k0 + n*8 + 2*t4 + c lies past row iw + mt*16 + g + 8r when n*8 + c - mt*16 - 8r > d:
        // one register and a constant per element, in a pass of its own (index arithmetic inside the
        // softmax spilled beside head size 128's O).
        const int d = iw - k0 + g - 2 * t4;
        for (int mt = 0; mt < kMT; mt++)
            for (int n = 0; n < kKeys / 8; n++)
                for (int e = 0; e < 4; e++)
                    if (n * 8 + e % 2 - mt * 16 - 8 * (e / 2) > d) s[mt][n][e] = -INFINITY;
    }
    float corr[kMT][2];  // exp2(m_old - m_new) of the lane's rows
    bool grew = false;   // some row's max grew (always at the first block: m = -inf)
    for (int mt = 0; mt < kMT; mt++)
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;  // of the raw scores: sl2 > 0 keeps the order
            for (int n = 0; n < kKeys / 8; n++) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
            // Causal: finite (key 0 is visible to every row in block 0, and m is finite after it).
            // With documents a row may see no key yet: m_new = -inf, and m_use = 0 keeps every
            // exp2 at 0 (not -inf - -inf); where m_new is finite m_use is m_new, the same bits.
            const float m_new = fmaxf(acc.m[mt][r], mx * sl2);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            corr[mt][r] = ptx::ex2_approx(acc.m[mt][r] - m_use);  // 0 on the first block (m = -inf)
            grew |= m_new != acc.m[mt][r];
            acc.m[mt][r] = m_new;
            float sum = 0.0f;
            for (int n = 0; n < kKeys / 8; n++)
                for (int c = 0; c < 2; c++) {
                    const float p = ptx::ex2_approx(fmaf(s[mt][n][2 * r + c], sl2, -m_use));  // 0 where masked
                    s[mt][n][2 * r + c] = p;
                    sum += p;
                }
            acc.l[mt][r] = acc.l[mt][r] * corr[mt][r] + sum;  // this lane's columns; the quad is summed at the end
        }
    // O rescaled only when some row of the warp has a new max: otherwise every corr is 2^0 = 1 and
    // the 2 x HS/8 x 4 multiplies would change no bit (warp-uniform through the vote).
    if (__any_sync(kFullMask, grew))
        for (int mt = 0; mt < kMT; mt++)
            for (int n = 0; n < HS / 8; n++)
                for (int e = 0; e < 4; e++) acc.o[mt][n][e] *= corr[mt][e / 2];
}

/// O += P V for one key block: p (the softmax's output) rounded to bf16 as A fragments straight from
/// the accumulators; vs the block's V tile (64 x flash_tile_ld(HS) bf16) read by ldmatrix.trans.
template <int HS>
__device__ __forceinline__ void fwd_pv(FwdAcc<HS>& acc, const float (&p)[kMT][kKeys / 8][4], const bf16* vs) {
    constexpr int kLd = kTileLd<HS>;
    for (int kk = 0; kk < kKeys / 16; kk++) {
        uint32_t pa[kMT][4];
        for (int mt = 0; mt < kMT; mt++) acc_to_a(pa[mt], p[mt][2 * kk], p[mt][2 * kk + 1]);
        for (int np = 0; np < HS / 16; np++) {
            uint32_t bb[4];
            load_b_cols(bb, vs + kk * 16 * kLd + np * 16, kLd);  // one V load, both m16 tiles
            for (int mt = 0; mt < kMT; mt++) {
                mma(acc.o[mt][2 * np], pa[mt], bb);
                mma(acc.o[mt][2 * np + 1], pa[mt], bb + 2);
            }
        }
    }
}

/// out = O / l (bf16) and lse = m ln 2 + log l of the warp's rows below T.
template <int HS>
__device__ __forceinline__ void fwd_store(bf16* out, float* lse, const FwdAcc<HS>& acc, const FwdBlock& f, int T_,
                                          int C, int NH) {
    const int lane = threadIdx.x % kWarpSize, g = lane / 4, t4 = lane % 4;
    for (int mt = 0; mt < kMT; mt++)
        for (int r = 0; r < 2; r++) {
            float lr = acc.l[mt][r];
            lr += __shfl_xor_sync(kFullMask, lr, 1);
            lr += __shfl_xor_sync(kFullMask, lr, 2);
            const int i = f.iw + mt * 16 + g + 8 * r;
            if (i >= T_) continue;
            const float inv = 1.0f / lr;
            bf16* row = out + (static_cast<size_t>(f.b) * T_ + i) * C + f.h * HS + 2 * t4;
            for (int n = 0; n < HS / 8; n++)
                *reinterpret_cast<uint32_t*>(row + n * 8) =
                    ptx::pack_bf16x2(acc.o[mt][n][2 * r] * inv, acc.o[mt][n][2 * r + 1] * inv);
            if (t4 == 0) lse[(static_cast<size_t>(f.b) * NH + f.h) * T_ + i] = acc.m[mt][r] * kLn2 + logf(lr);
        }
}

/// Forward with Q's fragments in registers, K and V double-buffered (head size 64). grid (NH,
/// ceil(T / 128), B), block 128, smem flash_forward_smem_bytes(HS): stage s's K at s * 128 rows,
/// its V 64 rows after; Q's 128 rows fill stage 1 until their fragments are in registers.
template <int HS>
__global__ void __launch_bounds__(kFwdThreads, 1)
    flash_forward_qreg_kernel(bf16* out, float* lse, const bf16* qkv, int T_, int C, int NH, int NKV, const int* doc) {
    constexpr int kLd = kTileLd<HS>;
    EXTERN_SHARED(bf16, kv);
    bf16* qs = kv + 2 * kKeys * kLd;
    const int warp = threadIdx.x / kWarpSize;
    const FwdBlock f = fwd_block<HS>(qkv, T_, C, NH, NKV, doc);
    copy_rows<HS, kFwdRows, kFwdThreads>(qs, f.q, f.stride, f.i0, T_);
    copy_rows<HS, kKeys, kFwdThreads>(kv, f.k, f.stride, f.kb0 * kKeys, T_);
    copy_rows<HS, kKeys, kFwdThreads>(kv + kKeys * kLd, f.v, f.stride, f.kb0 * kKeys, T_);
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[kMT][HS / 16][4];  // Q's A fragments, loaded once
    for (int mt = 0; mt < kMT; mt++)
        for (int kk = 0; kk < HS / 16; kk++) load_a(qf[mt][kk], qs + (warp * kMT + mt) * 16 * kLd + kk * 16, kLd);
    __syncthreads();  // every warp has its Q fragments: stage 1 may take key block 1
    FwdAcc<HS> acc;
    fwd_init(acc);
    for (int kb = f.kb0; kb < f.n_kb; kb++) {
        const int stage = (kb - f.kb0) % 2, k0 = kb * kKeys;
        if (kb + 1 < f.n_kb) {  // block kb + 1 into the other stage (its last reader passed the barrier below)
            bf16* next = kv + (stage ^ 1) * 2 * kKeys * kLd;
            copy_rows<HS, kKeys, kFwdThreads>(next, f.k, f.stride, k0 + kKeys, T_);
            copy_rows<HS, kKeys, kFwdThreads>(next + kKeys * kLd, f.v, f.stride, k0 + kKeys, T_);
            ptx::cp_async_commit();
            ptx::cp_async_wait<1>();
        } else {
            ptx::cp_async_wait<0>();
        }
        __syncthreads();  // block kb is in shared memory for every warp
        const bf16* ks = kv + stage * 2 * kKeys * kLd;
        if (f.sees(k0)) {
            float s[kMT][kKeys / 8][4];
            auto qa = [&](uint32_t* a, int mt, int kk) {
                for (int e = 0; e < 4; e++) a[e] = qf[mt][kk][e];
            };
            fwd_scores<HS>(s, qa, ks);
            fwd_softmax(s, acc, k0, f, T_);
            fwd_pv(acc, s, ks + kKeys * kLd);
        }
        __syncthreads();  // block kb's stage is no longer read: the next step's copy may overwrite it
    }
    if (f.active) fwd_store(out, lse, acc, f, T_, C, NH);
}

/// Forward with Q in shared memory and one K and one V buffer in FlashAttention-2's copy order
/// (head size 128). grid (NH, ceil(T / 128), B), block 128, smem flash_forward_smem_bytes(HS): Q
/// (128 rows), then K (64), then V (64).
template <int HS>
__global__ void __launch_bounds__(kFwdThreads, 1)
    flash_forward_qsmem_kernel(bf16* out, float* lse, const bf16* qkv, int T_, int C, int NH, int NKV, const int* doc) {
    constexpr int kLd = kTileLd<HS>;
    EXTERN_SHARED(bf16, qs);
    bf16* ks = qs + kFwdRows * kLd;
    bf16* vs = ks + kKeys * kLd;
    const FwdBlock f = fwd_block<HS>(qkv, T_, C, NH, NKV, doc);
    const bf16* qw = qs + (threadIdx.x / kWarpSize) * kMT * 16 * kLd;  // the warp's 32 rows of Q
    copy_rows<HS, kFwdRows, kFwdThreads>(qs, f.q, f.stride, f.i0, T_);
    copy_rows<HS, kKeys, kFwdThreads>(ks, f.k, f.stride, f.kb0 * kKeys, T_);
    ptx::cp_async_commit();
    FwdAcc<HS> acc;
    fwd_init(acc);
    for (int kb = f.kb0; kb < f.n_kb; kb++) {
        const int k0 = kb * kKeys;
        ptx::cp_async_wait<0>();
        __syncthreads();  // K of block kb (and Q) landed; every warp is past block kb - 1's P V: V's buffer is free
        copy_rows<HS, kKeys, kFwdThreads>(vs, f.v, f.stride, k0, T_);
        ptx::cp_async_commit();
        const bool run = f.sees(k0);
        float s[kMT][kKeys / 8][4];
        auto qa = [&](uint32_t* a, int mt, int kk) { load_a(a, qw + mt * 16 * kLd + kk * 16, kLd); };
        if (run) fwd_scores<HS>(s, qa, ks);
        ptx::cp_async_wait<0>();
        __syncthreads();  // V of block kb landed; every warp is past S = Q K^T: K's buffer is free
        if (kb + 1 < f.n_kb) {
            copy_rows<HS, kKeys, kFwdThreads>(ks, f.k, f.stride, k0 + kKeys, T_);
            ptx::cp_async_commit();
        }
        if (run) {
            fwd_softmax(s, acc, k0, f, T_);
            fwd_pv(acc, s, vs);
        }
    }
    if (f.active) fwd_store(out, lse, acc, f, T_, C, NH);
}

void flash_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T_, int C, int NH, int NKV,
                             cudaStream_t stream, const int* doc) {
    check_flash(T_, C, NH, NKV, {out, qkv});
    const dim3 grid(NH, ceil_div(T_, kFwdRows), B);
    if (C / NH == 64)
        launch_flash<kFwdThreads>(flash_forward_qreg_kernel<64>, grid, flash_forward_smem_bytes(64), stream, out, lse,
                                  qkv, T_, C, NH, NKV, doc);
    else
        launch_flash<kFwdThreads>(flash_forward_qsmem_kernel<128>, grid, flash_forward_smem_bytes(128), stream, out,
                                  lse, qkv, T_, C, NH, NKV, doc);
}

}  // namespace llmtrain::cuda
