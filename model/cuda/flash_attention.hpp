// model/cuda/flash_attention.hpp — which shapes the tensor-core FlashAttention-2 kernels
// (flash_forward.cu, flash_backward.cu; model.attention = "native" in bf16) take, their tiles, the dynamic shared
// memory they need and the backward's workspace (plain C++: CudaOps, the dry run and the tests read
// it; other shapes stay on attention.cu's CUDA-core kernels).
#pragma once
#include <algorithm>
#include <cstddef>

// The CUDA types flash_attention_backward_tiled names, declared (not defined) so that plain C++
// (tools/bench/attention_bench.cpp) can call it without CUDA headers: cuda_bf16.h's bf16 and the
// struct behind cudaStream_t (driver_types.h); the emulator compiles against the same headers.
struct __nv_bfloat16;
struct CUstream_st;

namespace llmtrain::cuda {

/// True when head size C / NH is 64 or 128 (the kernels are compiled for those two).
inline bool flash_attention_supported(int C, int NH) {
    return NH > 0 && C % NH == 0 && (C / NH == 64 || C / NH == 128);
}

/// Query rows of one forward block: 128, so that each K/V tile copied serves 128 queries.
constexpr int flash_forward_rows() { return 128; }
/// Warps of a forward block: 4, of 32 rows (two m16 tiles) each, so that each K or V fragment read
/// from shared memory feeds two mma tiles.
constexpr int flash_forward_warps() { return 4; }
/// Keys per step of the forward.
constexpr int flash_key_rows() { return 64; }
/// Row stride (elements) of a bf16 tile in shared memory: 16 bytes of padding keep ldmatrix's
/// eight row reads of one 8x8 matrix on distinct banks.
constexpr int flash_tile_ld(int head_size) { return head_size + 8; }
/// Dynamic shared memory of the forward kernel, 256 tile rows:
/// at head size 64 two stages of K and V (cp.async double buffering), the Q tile (128 rows, one
/// stage) in stage 1 until its fragments are in registers; at head size 128 the Q tile kept for the
/// whole loop and one K and one V tile. 36,864 B at head size 64, 69,632 B at 128.
constexpr size_t flash_forward_smem_bytes(int head_size) {
    return 2 * static_cast<size_t>(flash_tile_ld(head_size)) * (flash_forward_rows() + 2 * flash_key_rows());
}
static_assert(flash_forward_smem_bytes(64) == 36864 && flash_forward_smem_bytes(128) == 69632);

// ---- the fused backward: its tiles ----
//
// A backward block owns `keys` keys of one key/value head (16 per warp) and walks the query rows
// `rows` at a time. Two tiles per head size, FlashAttention-2's own pairs (its launch templates,
// by the same opt-in limit):
// - large, where the device allows it (sm_80: 163 KiB, sm_90: 227 KiB per block): 128 keys of 8
//   warps x 128 rows at head size 64 (147,456 B), x 64 rows at head size 128 (158,720 B). Each warp
//   computes a 16-key x rows slice of S^T and dP^T per step: 192 accumulator registers with dK and
//   dV (ptxas: no spill), every K/V fragment read feeding twice the mma of the half-height step,
//   and half the steps (two barriers each) per key block.
// - small, every device that runs the path (the 99 KiB of sm_86/89/120 included): 128 keys x 64
//   rows at head size 64 (93,184 B), 64 keys of 4 warps x 32 rows at head size 128 (75,264 B).
// At head size 64 both tiles hold 128 keys and add every sum in the same order (a step's rows are
// the next ones of the same walk), so they give the same bits; at head size 128 the key blocks
// differ, and so does the order of dQ's terms (both within the same bound). CudaOps runs
// flash_backward_tile(head_size, the device's cudaDevAttrMaxSharedMemoryPerBlockOptin, read once
// when the backend is made): a constant of the device, so every backward of a run takes the same
// tile and gives the same bits (flash_attention_backward_tiled runs a named tile, checked against
// the device, for benchmarks and tests).

/// A tile of the fused backward: keys per block (16 per warp) and query rows per step.
struct FlashBackwardTile {
    int keys, rows;
    constexpr bool operator==(const FlashBackwardTile&) const = default;
};
/// The large tile: 128 keys x 128 rows at head size 64, x 64 rows at 128.
constexpr FlashBackwardTile flash_backward_tile_large(int head_size) {
    return {128, head_size == 64 ? 128 : 64};
}
/// The small tile: 128 keys x 64 rows at head size 64, 64 keys x 32 rows at 128.
constexpr FlashBackwardTile flash_backward_tile_small(int head_size) {
    return head_size == 64 ? FlashBackwardTile{128, 64} : FlashBackwardTile{64, 32};
}
/// Warps of a backward block of `keys` keys (16 each): 8 for 128 keys, 4 for 64.
constexpr int flash_backward_warps(int keys) { return keys / 16; }
/// Dynamic shared memory of the fused backward kernel with tile t: the block's K and V tiles (keys
/// x ld bf16 each), two stages of Q and dO tiles (rows x ld bf16) and of lse and D (rows fp32), and
/// the dS^T tile (keys x (rows + 8) bf16): 147,456 / 93,184 B at head size 64 (large / small),
/// 158,720 / 75,264 B at 128.
constexpr size_t flash_backward_smem_bytes(int head_size, FlashBackwardTile t) {
    const size_t ld = flash_tile_ld(head_size), br = t.rows, bc = t.keys;
    return 2 * ld * (2 * bc + 2 * 2 * br) + 2 * bc * (br + 8) + 4 * 2 * 2 * br;
}
#ifdef __CUDACC__
#define LLMTRAIN_FLASH_HD __host__ __device__  // flash_dq_stage_slot: the kernel's and the tests'
#else
#define LLMTRAIN_FLASH_HD
#endif
/// A 16-byte piece of a stage of the fused backward: tile 0 (Q) or 1 (dO), row, piece (0 .. HS/8-1).
struct FlashStagePiece {
    int tile, row, piece;
};
/// Where warp `warp` of a backward block (threads threads, rows query rows a step) stages piece p
/// (dQ columns 4p .. 4p + 3 of the warp's kDq = 2 HS rows / threads) of row rr (0-15) of its fp32
/// dQ tile, once the stage's Q and dO are dead: only in rows its own threads copy into (copy_rows:
/// thread t fills row t / c + k threads / c of both tiles, c = HS / 8 pieces a row; with c dividing
/// 32, warp w owns rows (32 / c) w + j + k threads / c, j < 32 / c), so no other warp touches them
/// before this warp's next copy. The stage (2 x rows x HS bf16) holds exactly the block's fp32 dQ
/// tile (rows x HS), each warp's share in its own rows. Rows of one j start on the same 16-byte bank
/// group (row strides of 16 bytes mod 128; threads / c a multiple of 8), so the 4 dQ rows whose
/// float2 pairs a half-warp stores at once (rows 4f .. 4f + 3, pieces 2n, 2n + 1) go to 4 rows of
/// one j with pieces XORed by 2 x (rr mod 4): 8 different 16-byte bank groups, no conflict; 8 lanes
/// reading 8 consecutive pieces of a dQ row get 8 different ones too
/// (FlashAttentionBackwardTile.DqStagingOwnRowsNoBankConflicts).
template <int HS, int ROWS, int THREADS>
LLMTRAIN_FLASH_HD constexpr FlashStagePiece flash_dq_stage_slot(int warp, int rr, int p) {
    constexpr int kChunks = HS / 8, kR = 32 / kChunks, kPass = THREADS / kChunks, kPasses = ROWS / kPass;
    constexpr int kDq = 2 * HS * ROWS / THREADS, kSlotsPerRow = kDq / 4 / kChunks;  // a dQ row: 1 or 2 tile rows
    static_assert(32 % kChunks == 0 && kPass % 8 == 0 && kChunks >= 8 && kSlotsPerRow >= 1);
    static_assert(2 * kR * kPasses == 16 * kSlotsPerRow, "the warp's rows of the stage hold its dQ tile exactly");
    const int a = rr % 4, grp = (rr / 4) * kSlotsPerRow + p / kChunks;
    const int j = grp % kR, tk = (grp / kR) * 4 + a;  // tk: the tile and the copy pass
    return {tk / kPasses, warp * kR + j + kPass * (tk % kPasses), (p % kChunks) ^ (2 * a)};
}

/// The tile a device allowing smem_optin bytes of dynamic shared memory per block
/// (cudaDevAttrMaxSharedMemoryPerBlockOptin) runs: the large one where it fits, else the small.
constexpr FlashBackwardTile flash_backward_tile(int head_size, long long smem_optin) {
    const FlashBackwardTile large = flash_backward_tile_large(head_size);
    return static_cast<long long>(flash_backward_smem_bytes(head_size, large)) <= smem_optin
               ? large
               : flash_backward_tile_small(head_size);
}
static_assert(flash_backward_smem_bytes(64, flash_backward_tile_large(64)) == 147456 &&
              flash_backward_smem_bytes(64, flash_backward_tile_small(64)) == 93184 &&
              flash_backward_smem_bytes(128, flash_backward_tile_large(128)) == 158720 &&
              flash_backward_smem_bytes(128, flash_backward_tile_small(128)) == 75264);
static_assert(flash_backward_tile(64, 101376) == FlashBackwardTile{128, 64} &&
              flash_backward_tile(128, 101376) == FlashBackwardTile{64, 32} &&
              flash_backward_tile(64, 166912) == FlashBackwardTile{128, 128} &&
              flash_backward_tile(128, 166912) == FlashBackwardTile{128, 64});
/// flash_backward_tile at head_size on the current CUDA device (cudaGetDevice, and its
/// cudaDevAttrMaxSharedMemoryPerBlockOptin, the attribute make_cuda_backend reads for "auto"): the
/// tile a CudaOps made on this device launches. Defined in flash_backward.cu: callable only from
/// code linked with the CUDA backend (llmtrain_cuda, llmtrain_cuda_emu). Errors: a failed CUDA call
/// throws as CUDA_CHECK does.
FlashBackwardTile flash_backward_tile_on_device(int head_size);

/// flash_attention_backward (kernels.cuh: dqkv (B,T,(NH + 2 NKV)*HS) overwritten from dout (B,T,C),
/// qkv, out (B,T,C) and the forward's lse (B,NH,T), all bf16 but lse fp32, C = NH*HS, queued on
/// `stream`) with the named tile, the head size's large or small one, checked against the device
/// (flash_backward_smem_bytes within its opt-in shared memory per block) — not only its choice
/// (flash_backward_tile_on_device(C / NH), what CudaOps runs). tools/bench/attention_bench's
/// native-99k passes the small tile, to time it beside the large one an H100 takes. scratch:
/// flash_attention_backward_scratch_bytes(B, T, C, NH, tile.keys) bytes, 16-byte aligned. Defined
/// in flash_backward.cu (llmtrain_cuda, llmtrain_cuda_emu). Errors: std::invalid_argument naming
/// the tile when it is neither, or needs more than the device's opt-in shared memory; as
/// flash_attention_backward for shapes and pointers; a failed CUDA call throws as CUDA_CHECK does.
/// doc: null (causal) or the document starts (B,T) int32 of document masking, as
/// flash_attention_backward's (kernels.cuh).
void flash_attention_backward_tiled(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                    const __nv_bfloat16* out, const float* lse, int B, int T, int C, int NH, int NKV,
                                    FlashBackwardTile tile, float* scratch, CUstream_st* stream,
                                    const int* doc = nullptr);

/// The largest dynamic shared memory any flash kernel needs at this head size (64 or 128) with the
/// small backward tile: what a device must allow per block (cudaDevAttrMaxSharedMemoryPerBlockOptin)
/// to run this path. 93,184 B at head size 64, 75,264 B at 128 (the backward's, both under the 99
/// KiB of sm_86/89/120; the large tiles are taken only where they fit, flash_backward_tile); 0 at
/// the head sizes the kernels do not take.
inline size_t flash_attention_smem_bytes(int head_size) {
    if (head_size != 64 && head_size != 128) return 0;
    return std::max(flash_forward_smem_bytes(head_size),
                    flash_backward_smem_bytes(head_size, flash_backward_tile_small(head_size)));
}

// ---- the backward's dQ workspace, bounded in T (docs/attention.md "The workspace") ----
//
// Each key block writes its fp32 dQ partial of every query row it meets; a second kernel sums a
// row's partials in key-block order. One (b, h) holds about T^2 / (2 keys) partial rows, so the
// backward never holds them all at once: whole batch rows at a time while one row fits
// flash_dq_workspace_cap ("batch chunks"), else ("row chunks") the launches cover one query head of
// each group of a few key/value heads over a range of query rows, carrying dK and dV in fp32
// between them. Every dQ element is summed in the same order, and every dK/dV accumulator receives
// the same terms in the same order, in either mode: the same bits at any cap.

/// The fixed cap on the backward's dQ workspace (the dQ partials, and in row chunks the dK/dV
/// carry): 256 MiB.
constexpr size_t kFlashDqWorkspaceCap = size_t{256} << 20;
/// The cap in force: kFlashDqWorkspaceCap. A test hook, not a setting: only tests lower it (to
/// force batch or row chunks at small shapes, tests/cuda/test_flash_long.cpp); every reader (the
/// scratch size, the launcher) sees the same value, so they agree.
inline size_t flash_dq_workspace_cap = kFlashDqWorkspaceCap;

/// Rows of dQ partials that key blocks 0 .. kb-1 (`keys` keys each) hold in a launch over query
/// rows [qa, qb) of one (b, h): key block k holds rows [max(k keys, qa), qb). With qa = 0, qb = T,
/// kb = ceil(T / keys): a whole row's partials, about T^2/(2 keys) + T/2.
LLMTRAIN_FLASH_HD constexpr size_t flash_dq_rows_before(int kb, int keys, int qa, int qb) {
    const size_t k = kb, before = (static_cast<size_t>(qa) + keys - 1) / keys;  // blocks starting before qa
    const size_t m = k < before ? k : before;
    return m * static_cast<size_t>(qb - qa) + (k - m) * static_cast<size_t>(qb) -
           static_cast<size_t>(keys) * (k * (k - 1) / 2 - m * (m - 1) / 2);
}
/// Rows of dQ partials a launch over query rows [qa, qb) holds per (b, h): those of its key
/// blocks 0 .. ceil(qb / keys) - 1.
LLMTRAIN_FLASH_HD constexpr size_t flash_dq_chunk_rows(int keys, int qa, int qb) {
    return flash_dq_rows_before((qb + keys - 1) / keys, keys, qa, qb);
}
/// Rows of dQ partials one (b, h) holds with `keys` keys per backward block over all T queries.
inline size_t flash_dq_partial_rows(int T, int keys) { return flash_dq_chunk_rows(keys, 0, T); }
static_assert(flash_dq_rows_before(3, 128, 0, 300) == 300 + 172 + 44 &&
              flash_dq_rows_before(3, 64, 128, 256) == 128 + 128 + 128 && flash_dq_chunk_rows(64, 128, 256) == 448 &&
              flash_dq_chunk_rows(64, 256, 300) == 5 * 44);
/// dQ partial bytes of one batch row (all NH heads) with `keys` keys per backward block.
inline size_t flash_dq_partial_bytes_per_batch(int T, int C, int NH, int keys) {
    return static_cast<size_t>(NH) * flash_dq_partial_rows(T, keys) * static_cast<size_t>(C / NH) * sizeof(float);
}
/// True when one batch row's dQ partials exceed flash_dq_workspace_cap: the backward runs in row
/// chunks (flash_backward_row_split). GPT-2 124M at T 1024 (13.5 MiB a row) does not; Llama 3 8B at
/// T 8192 (32 heads of 128: 4,160 MiB a row with 128 keys, 8,256 MiB with 64) does.
inline bool flash_backward_splits_rows(int T, int C, int NH, int keys) {
    return flash_dq_partial_bytes_per_batch(T, C, NH, keys) > flash_dq_workspace_cap;
}
/// Batch rows per backward launch in batch chunks: as many as fit flash_dq_workspace_cap, at least
/// 1, at most B (1 in row chunks).
inline int flash_backward_batch_chunk(int B, int T, int C, int NH, int keys) {
    const size_t per = flash_dq_partial_bytes_per_batch(T, C, NH, keys);
    const size_t fit = per == 0 ? size_t(B) : flash_dq_workspace_cap / per;
    return static_cast<int>(std::max<size_t>(1, std::min<size_t>(fit, size_t(B))));
}
/// Row chunks: each launch covers kv_heads key/value heads (one query head of each group) and
/// query_rows query rows (a multiple of the block's keys; the last chunk of a row may be shorter).
struct FlashRowSplit {
    int kv_heads, query_rows;
};
/// fp32 dK/dV carry of one key/value head in row chunks: every key block's dK and dV accumulators
/// (keys x HS each), ceil(T / keys) blocks.
inline size_t flash_dkv_carry_bytes(int T, int HS, int keys) {
    return (static_cast<size_t>(T) + keys - 1) / keys * keys * HS * 2 * sizeof(float);
}
/// Bytes split s needs at (T, HS, keys): the carry of its kv_heads heads and the partials of its
/// largest query chunk (each head's rows, flash_dq_chunk_rows, x HS floats).
inline size_t flash_backward_row_split_bytes(int T, int HS, int keys, FlashRowSplit s) {
    size_t rows = 0;
    for (int qa = 0; qa < T; qa += s.query_rows)
        rows = std::max(rows, flash_dq_chunk_rows(keys, qa, std::min(T, qa + s.query_rows)));
    return static_cast<size_t>(s.kv_heads) * (flash_dkv_carry_bytes(T, HS, keys) + rows * HS * sizeof(float));
}
/// The row-chunk split at (T, head size HS, NKV key/value heads, keys per block): the most
/// key/value heads (at most NKV) whose carry takes at most half of flash_dq_workspace_cap, then the
/// most query rows (a multiple of keys, at most T rounded up) whose partials fit the rest (bounded
/// as ceil(T / keys) x query_rows rows a head); fewer heads while not even `keys` rows fit. Within the
/// cap for every T at which one head's carry and one key block's rows fit (Llama 3 8B: T <= 349,525,
/// check_flash's limit); past that the smallest split, 1 head x `keys` rows, is used (about 12 T x HS
/// bytes: linear in T).
inline FlashRowSplit flash_backward_row_split(int T, int HS, int NKV, int keys) {
    const size_t cap = flash_dq_workspace_cap, carry = flash_dkv_carry_bytes(T, HS, keys);
    const size_t nkb = (static_cast<size_t>(T) + keys - 1) / keys, max_rows = nkb * keys;
    int heads = static_cast<int>(std::clamp<size_t>(cap / 2 / std::max<size_t>(carry, 1), 1, std::max(NKV, 1)));
    for (;; heads--) {
        const size_t spent = heads * carry, per_row = nkb * heads * HS * sizeof(float);
        const size_t rows = spent >= cap ? 0 : (cap - spent) / per_row / keys * keys;
        if (rows >= static_cast<size_t>(keys) || heads == 1)
            return {heads, static_cast<int>(std::clamp<size_t>(rows, keys, max_rows))};
    }
}
/// Bytes of the fp32 scratch flash_attention_backward needs with `keys` keys per block: D =
/// rowsum(dO o O) (B*NH*T floats, rounded up to 256 bytes), then the dQ workspace. In batch chunks
/// the partials of flash_backward_batch_chunk rows x NH heads x flash_dq_partial_rows(T, keys) rows
/// of head-size floats, which a second kernel sums in key-block order (deterministic, no atomics):
/// GPT-2 124M at micro-batch 32 (T 1024, 12 heads of 64, 128 keys): 13.5 MiB of partials per batch
/// row, 18 rows per chunk, 244.5 MiB in all with D (all 32 rows at once: 433.5 MiB). In row chunks
/// flash_dq_workspace_cap, which every split for NKV dividing NH fits (the smallest split's bytes
/// where they exceed it): Llama 3 8B at T 8192 or 32768, 256 MiB + D.
inline size_t flash_attention_backward_scratch_bytes(int B, int T, int C, int NH, int keys) {
    const size_t heads = static_cast<size_t>(B) * NH;
    const size_t delta = (heads * T * sizeof(float) + 255) / 256 * 256;
    if (flash_backward_splits_rows(T, C, NH, keys))
        return delta + std::max(flash_dq_workspace_cap,
                                flash_backward_row_split_bytes(T, C / NH, keys, FlashRowSplit{1, keys}));
    return delta + static_cast<size_t>(flash_backward_batch_chunk(B, T, C, NH, keys)) *
                       flash_dq_partial_bytes_per_batch(T, C, NH, keys);
}
/// Bytes of scratch that serve flash_attention_backward on any device: the larger of the head
/// size's two tiles' needs (at head size 64 both hold 128 keys; at 128 usually the small tile's 64
/// keys need more, the more partials, unless the cap makes the 128-key chunks hold more):
/// what the dry run (no device) counts; CudaOps asks for its device's tile (CudaOps::flash_tile).
/// Head size 128, B 8, T 2048, 16 heads: 257.0 MiB (the small tile's 64-key rows, 264 MiB each, run in
/// row chunks within the cap; the large tile needs 137.0 MiB: batch chunks of one row).
inline size_t flash_attention_backward_scratch_bytes(int B, int T, int C, int NH) {
    const int hs = NH > 0 ? C / NH : 0;
    return std::max(flash_attention_backward_scratch_bytes(B, T, C, NH, flash_backward_tile_small(hs).keys),
                    flash_attention_backward_scratch_bytes(B, T, C, NH, flash_backward_tile_large(hs).keys));
}

}  // namespace llmtrain::cuda
