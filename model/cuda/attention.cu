// model/cuda/attention.cu — causal multi-head attention, forward and backward, without ever storing
// the (B, NH, T, T) score matrix: FlashAttention-2 (Dao 2023) tiling with an online softmax, written
// for CUDA cores with fp32 accumulation (emulatable: no tensor-core instructions).
//
// Layout: qkv (B,T,3C) holds q | k | v, each (NH,HS) per position; out (B,T,C); lse (B,NH,T) is the
// log-sum-exp of each row of scaled scores s_ij = q_i.k_j / sqrt(HS), j <= i.
// Forward: a block owns kRows query rows of one (b, h), one warp per row; key/value tiles of
// kTile rows are staged in shared memory in fp32; lane j scores key j of the tile, the warp keeps
// the running max m, sum l and output o (each lane owns dims d = lane + 32r); a warp shares its
// tile's probabilities through a shared-memory row (one __syncwarp instead of 32 shuffles).
// Backward (FA-2, Algorithm 2, split in two kernels so no atomics are needed):
//   D_i = dO_i . O_i;  P_ij = exp(s_ij - lse_i);  dP_ij = dO_i . v_j;  dS_ij = P_ij (dP_ij - D_i)
//   dv_j = sum_i P_ij dO_i,  dk_j = scale sum_i dS_ij q_i   (kernel over key rows)
//   dq_i = scale sum_j dS_ij k_j                             (kernel over query rows)
// Document masking (doc non-null, Ops::attention_forward_doc's doc_start (B,T) int32): row i sees
// keys doc[b,i] <= j <= i only. Key tiles wholly before a warp's document are skipped (and, for the
// block, those before its first row's document are never loaded); the key/value kernel's walk over
// query tiles ends at the first query whose document starts after the block's last key.
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

constexpr int kRows = 8;        ///< query (or key) rows per block: one per warp
constexpr int kTile = 32;       ///< keys (or queries) per shared-memory tile: one per lane
constexpr int kMaxHS = 128;     ///< largest head size (per-lane registers hold kMaxHS/32 dims)
constexpr int kDimsPerLane = kMaxHS / kWarpSize;

/// Row i of head h of batch b inside qkv (part 0 = q, 1 = k, 2 = v).
template <typename T>
__device__ inline const T* qkv_row(const T* qkv, int b, int i, int h, int part, int T_, int C, int HS) {
    return qkv + (static_cast<size_t>(b) * T_ + i) * 3 * C + part * C + h * HS;
}

/// The first key row i of batch row b sees: doc[b,i] with documents, else 0.
__device__ inline int first_key(const int* doc, int b, int T_, int i) {
    return doc == nullptr ? 0 : doc[static_cast<size_t>(b) * T_ + i];
}

/// Copies rows [r0, r0+kTile) (those < T) of one head's q, k or v (part) into tile (kTile x ld) fp32.
template <typename T>
__device__ inline void load_tile(float* tile, int ld, const T* src, int b, int r0, int h, int part,
                                 int T_, int C, int HS) {
    for (int x = threadIdx.x; x < kTile * HS; x += blockDim.x) {
        const int r = x / HS, d = x % HS;
        if (r0 + r < T_) tile[r * ld + d] = to_float(qkv_row(src, b, r0 + r, h, part, T_, C, HS)[d]);
    }
}

/// grid (ceil(T/kRows), NH, B), block kRows*32, smem attention_forward_smem(HS).
/// smem: K tile (kTile x HS+1), V tile (kTile x HS), per-warp q row (kRows x HS) and
/// probability row (kRows x kTile), all fp32.
template <typename T>
__global__ void attention_forward_kernel(T* out, float* lse, const T* qkv, int T_, int C, int NH, const int* doc) {
    EXTERN_SHARED(float, smem);
    const int HS = C / NH, b = blockIdx.z, h = blockIdx.y;
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int i0 = blockIdx.x * kRows, i = i0 + warp;
    float* ks = smem;                      // (kTile, HS+1): lane j reads row j, padding avoids bank conflicts
    float* vs = ks + kTile * (HS + 1);     // (kTile, HS)
    float* qs = vs + kTile * HS + warp * HS;  // this warp's q row (HS)
    float* ps = vs + kTile * HS + kRows * HS + warp * kTile;  // this warp's probabilities of the tile
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    if (i < T_)
        for (int d = lane; d < HS; d += kWarpSize) qs[d] = to_float(qkv_row(qkv, b, i, h, 0, T_, C, HS)[d]);
    __syncwarp(kFullMask);
    float m = -INFINITY, l = 0.0f, o[kDimsPerLane] = {};
    const int last_key = min(i0 + kRows, T_);  // keys [0, last_key) are needed by some row of the block
    const int lo = i < T_ ? first_key(doc, b, T_, i) : 0;  // this row's first key
    for (int k0 = first_key(doc, b, T_, i0) / kTile * kTile; k0 < last_key; k0 += kTile) {
        __syncthreads();  // the previous tile is no longer read
        load_tile(ks, HS + 1, qkv, b, k0, h, 1, T_, C, HS);
        load_tile(vs, HS, qkv, b, k0, h, 2, T_, C, HS);
        __syncthreads();
        if (i >= T_ || k0 > i || k0 + kTile <= lo) continue;  // warp-uniform: this row sees no key of the tile
        const int j = k0 + lane;
        float s = -INFINITY;
        if (j <= i && j >= lo) {
            float dot = 0.0f;
            for (int d = 0; d < HS; d++) dot += qs[d] * ks[lane * (HS + 1) + d];
            s = dot * scale;
        }
        const float m_new = fmaxf(m, warp_max(s));  // finite: key max(k0, lo) <= i is in the tile
        const float p = j <= i && j >= lo ? expf(s - m_new) : 0.0f;
        const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
        l = l * corr + warp_sum(p);
        for (int r = 0; r < kDimsPerLane; r++) o[r] *= corr;
        // Every lane needs every p_j: one shared-memory row instead of 32 shuffles. The
        // __syncthreads at the top of the next tile orders these reads before the next writes.
        ps[lane] = p;
        __syncwarp(kFullMask);
        const int n_keys = min(kTile, i - k0 + 1);
        for (int jj = 0; jj < n_keys; jj++) {
            const float pj = ps[jj];
            for (int r = 0; r < kDimsPerLane; r++) {
                const int d = lane + r * kWarpSize;
                if (d < HS) o[r] += pj * vs[jj * HS + d];
            }
        }
        m = m_new;
    }
    if (i >= T_) return;
    T* out_row = out + (static_cast<size_t>(b) * T_ + i) * C + h * HS;
    for (int r = 0; r < kDimsPerLane; r++) {
        const int d = lane + r * kWarpSize;
        if (d < HS) out_row[d] = from_float<T>(o[r] / l);
    }
    if (lane == 0) lse[(static_cast<size_t>(b) * NH + h) * T_ + i] = m + logf(l);
}

inline size_t attention_forward_smem(int HS) {
    return sizeof(float) * (kTile * (HS + 1) + kTile * HS + kRows * HS + kRows * kTile);
}

/// delta (B,NH,T) fp32 = dO_i . O_i per row; one warp per (b, t, h) row.
template <typename T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int B, int T_, int C,
                                       int NH) {
    const int HS = C / NH, lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;  // (b, t, h)
    if (row >= B * T_ * NH) return;  // warp-uniform
    const int h = row % NH, bt = row / NH, b = bt / T_, t = bt % T_;
    const size_t off = static_cast<size_t>(bt) * C + h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += kWarpSize) s += to_float(dout[off + d]) * to_float(out[off + d]);
    s = warp_sum(s);
    if (lane == 0) delta[(static_cast<size_t>(b) * NH + h) * T_ + t] = s;
}

/// dk, dv for kRows key rows of one (b, h), one warp per key row j; loops over query tiles i >= j.
/// grid (ceil(T/kRows), NH, B), block kRows*32, smem attention_backward_kv_smem(HS):
/// q tile and dO tile (kTile x HS+1 each), lse and delta (kTile each), per-warp k and v rows and
/// P and dS rows (kTile each).
template <typename T>
__global__ void attention_backward_kv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                             const float* delta, int T_, int C, int NH, const int* doc) {
    EXTERN_SHARED(float, smem);
    const int HS = C / NH, b = blockIdx.z, h = blockIdx.y;
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int j0 = blockIdx.x * kRows, j = j0 + warp;
    // Queries [j0, q_end) see some key of the block: with documents, up to the first query whose
    // document starts after the block's last key (doc is nondecreasing along t: a binary search).
    int q_end = T_;
    if (doc != nullptr) {
        const int j_last = min(j0 + kRows, T_) - 1;
        int a = j0, z = T_;
        while (a < z) {
            const int mid = (a + z) / 2;
            if (first_key(doc, b, T_, mid) > j_last) z = mid;
            else a = mid + 1;
        }
        q_end = a;
    }
    float* qs = smem;                        // (kTile, HS+1)
    float* dos = qs + kTile * (HS + 1);      // (kTile, HS+1)
    float* lses = dos + kTile * (HS + 1);    // (kTile)
    float* deltas = lses + kTile;            // (kTile)
    float* kw = deltas + kTile + warp * 2 * HS;  // this warp's k row (HS), then its v row (HS)
    float* vw = kw + HS;
    float* pds = deltas + kTile + kRows * 2 * HS + warp * 2 * kTile;  // this warp's P and dS of the tile
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    const size_t stat = (static_cast<size_t>(b) * NH + h) * T_;
    if (j < T_)
        for (int d = lane; d < HS; d += kWarpSize) {
            kw[d] = to_float(qkv_row(qkv, b, j, h, 1, T_, C, HS)[d]);
            vw[d] = to_float(qkv_row(qkv, b, j, h, 2, T_, C, HS)[d]);
        }
    __syncwarp(kFullMask);
    float dk[kDimsPerLane] = {}, dv[kDimsPerLane] = {};
    for (int q0 = j0; q0 < q_end; q0 += kTile) {
        __syncthreads();
        load_tile(qs, HS + 1, qkv, b, q0, h, 0, T_, C, HS);
        for (int x = threadIdx.x; x < kTile * HS; x += blockDim.x) {
            const int r = x / HS, d = x % HS;
            if (q0 + r < T_)
                dos[r * (HS + 1) + d] = to_float(dout[(static_cast<size_t>(b) * T_ + q0 + r) * C + h * HS + d]);
        }
        for (int r = threadIdx.x; r < kTile; r += blockDim.x)
            if (q0 + r < T_) {
                lses[r] = lse[stat + q0 + r];
                deltas[r] = delta[stat + q0 + r];
            }
        __syncthreads();
        if (j >= T_) continue;  // warp-uniform
        const int i = q0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (i < T_ && i >= j && first_key(doc, b, T_, i) <= j) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HS; d++) {
                s += qs[lane * (HS + 1) + d] * kw[d];
                dp += dos[lane * (HS + 1) + d] * vw[d];
            }
            p = expf(s * scale - lses[lane]);
            ds = p * (dp - deltas[lane]);
        }
        pds[lane] = p;
        pds[kTile + lane] = ds;
        __syncwarp(kFullMask);
        const int n_q = min(kTile, T_ - q0);
        for (int ii = 0; ii < n_q; ii++) {
            const float pi = pds[ii], dsi = pds[kTile + ii];
            for (int r = 0; r < kDimsPerLane; r++) {
                const int d = lane + r * kWarpSize;
                if (d < HS) {
                    dv[r] += pi * dos[ii * (HS + 1) + d];
                    dk[r] += dsi * qs[ii * (HS + 1) + d];
                }
            }
        }
    }
    if (j >= T_) return;
    T* dk_row = dqkv + (static_cast<size_t>(b) * T_ + j) * 3 * C + C + h * HS;
    T* dv_row = dk_row + C;
    for (int r = 0; r < kDimsPerLane; r++) {
        const int d = lane + r * kWarpSize;
        if (d < HS) {
            dk_row[d] = from_float<T>(dk[r] * scale);
            dv_row[d] = from_float<T>(dv[r]);
        }
    }
}

inline size_t attention_backward_kv_smem(int HS) {
    return sizeof(float) * (2 * kTile * (HS + 1) + 2 * kTile + kRows * 2 * HS + kRows * 2 * kTile);
}

/// dq for kRows query rows of one (b, h), one warp per row i; loops over key tiles j <= i.
/// grid (ceil(T/kRows), NH, B), block kRows*32, smem attention_backward_q_smem(HS):
/// k and v tiles (kTile x HS+1 each), per-warp q and dO rows and dS row (kTile).
template <typename T>
__global__ void attention_backward_q_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                            const float* delta, int T_, int C, int NH, const int* doc) {
    EXTERN_SHARED(float, smem);
    const int HS = C / NH, b = blockIdx.z, h = blockIdx.y;
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int i0 = blockIdx.x * kRows, i = i0 + warp;
    const int lo = i < T_ ? first_key(doc, b, T_, i) : 0;  // this row's first key
    float* ks = smem;                         // (kTile, HS+1)
    float* vs = ks + kTile * (HS + 1);        // (kTile, HS+1)
    float* qw = vs + kTile * (HS + 1) + warp * 2 * HS;  // this warp's q row, then its dO row
    float* dow = qw + HS;
    float* dss = vs + kTile * (HS + 1) + kRows * 2 * HS + warp * kTile;  // this warp's dS of the tile
    const float scale = 1.0f / sqrtf(static_cast<float>(HS));
    const size_t stat = (static_cast<size_t>(b) * NH + h) * T_;
    float lse_i = 0.0f, delta_i = 0.0f;
    if (i < T_) {
        for (int d = lane; d < HS; d += kWarpSize) {
            qw[d] = to_float(qkv_row(qkv, b, i, h, 0, T_, C, HS)[d]);
            dow[d] = to_float(dout[(static_cast<size_t>(b) * T_ + i) * C + h * HS + d]);
        }
        lse_i = lse[stat + i];
        delta_i = delta[stat + i];
    }
    __syncwarp(kFullMask);
    float dq[kDimsPerLane] = {};
    const int last_key = min(i0 + kRows, T_);
    for (int k0 = first_key(doc, b, T_, i0) / kTile * kTile; k0 < last_key; k0 += kTile) {
        __syncthreads();
        load_tile(ks, HS + 1, qkv, b, k0, h, 1, T_, C, HS);
        load_tile(vs, HS + 1, qkv, b, k0, h, 2, T_, C, HS);
        __syncthreads();
        if (i >= T_ || k0 > i || k0 + kTile <= lo) continue;  // warp-uniform
        const int j = k0 + lane;
        float ds = 0.0f;
        if (j <= i && j >= lo) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HS; d++) {
                s += qw[d] * ks[lane * (HS + 1) + d];
                dp += dow[d] * vs[lane * (HS + 1) + d];
            }
            const float p = expf(s * scale - lse_i);
            ds = p * (dp - delta_i);
        }
        dss[lane] = ds;
        __syncwarp(kFullMask);
        const int n_keys = min(kTile, i - k0 + 1);
        for (int jj = 0; jj < n_keys; jj++) {
            const float dsj = dss[jj];
            for (int r = 0; r < kDimsPerLane; r++) {
                const int d = lane + r * kWarpSize;
                if (d < HS) dq[r] += dsj * ks[jj * (HS + 1) + d];
            }
        }
    }
    if (i >= T_) return;
    T* dq_row = dqkv + (static_cast<size_t>(b) * T_ + i) * 3 * C + h * HS;
    for (int r = 0; r < kDimsPerLane; r++) {
        const int d = lane + r * kWarpSize;
        if (d < HS) dq_row[d] = from_float<T>(dq[r] * scale);
    }
}

inline size_t attention_backward_q_smem(int HS) {
    return sizeof(float) * (2 * kTile * (HS + 1) + kRows * 2 * HS + kRows * kTile);
}

/// Throws std::invalid_argument unless C splits into NH heads of at most kMaxHS.
static void check_heads(int C, int NH) {
    if (NH <= 0 || C % NH != 0 || C / NH > kMaxHS)
        throw std::invalid_argument("cuda attention: n_embd " + std::to_string(C) + " must split into n_head " +
                                    std::to_string(NH) + " heads of at most " + std::to_string(kMaxHS));
}

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, cudaStream_t stream,
                       const int* doc) {
    check_heads(C, NH);
    launch(attention_forward_kernel<T>, dim3(ceil_div(T_, kRows), NH, B), dim3(kRows * kWarpSize),
           attention_forward_smem(C / NH), stream, out, lse, qkv, T_, C, NH, doc);
}

template <typename T>
void attention_delta(float* delta, const T* dout, const T* out, int B, int T_, int C, int NH, cudaStream_t stream) {
    const int rows = B * T_ * NH, block = 256;
    launch(attention_delta_kernel<T>, dim3(ceil_div(rows, block / kWarpSize)), dim3(block), 0, stream, delta, dout,
           out, B, T_, C, NH);
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B, int T_,
                        int C, int NH, float* scratch, cudaStream_t stream, const int* doc) {
    check_heads(C, NH);
    attention_delta(scratch, dout, out, B, T_, C, NH, stream);
    const float* delta = scratch;
    const dim3 grid(ceil_div(T_, kRows), NH, B);
    launch(attention_backward_kv_kernel<T>, grid, dim3(kRows * kWarpSize), attention_backward_kv_smem(C / NH),
           stream, dqkv, dout, qkv, lse, delta, T_, C, NH, doc);
    launch(attention_backward_q_kernel<T>, grid, dim3(kRows * kWarpSize), attention_backward_q_smem(C / NH),
           stream, dqkv, dout, qkv, lse, delta, T_, C, NH, doc);
}

size_t attention_backward_scratch_bytes(int B, int T_, int NH) {
    return sizeof(float) * static_cast<size_t>(B) * NH * T_;
}

#define INSTANTIATE(T)                                                                                \
    template void attention_forward<T>(T*, float*, const T*, int, int, int, int, cudaStream_t,       \
                                       const int*);                                                  \
    template void attention_delta<T>(float*, const T*, const T*, int, int, int, int, cudaStream_t);  \
    template void attention_backward<T>(T*, const T*, const T*, const T*, const float*, int, int, int, \
                                        int, float*, cudaStream_t, const int*);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
