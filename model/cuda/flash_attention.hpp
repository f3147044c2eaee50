// model/cuda/flash_attention.hpp — which shapes the tensor-core FlashAttention-2 kernels
// (flash_attention.cu, model.attention = "native" in bf16) take, their tiles, the dynamic shared
// memory they need and the backward's workspace (plain C++: CudaOps, the dry run and the tests read
// it; other shapes stay on attention.cu's CUDA-core kernels).
#pragma once
#include <algorithm>
#include <cstddef>

namespace llmtrain::cuda {

/// True when head size C / NH is 64 or 128 (the kernels are compiled for those two).
inline bool flash_attention_supported(int C, int NH) {
    return NH > 0 && C % NH == 0 && (C / NH == 64 || C / NH == 128);
}

/// Query rows of one forward block: 128 at both head sizes, so that each K/V tile copied serves 128
/// queries: at head size 64 4 warps of 32 rows (two m16 tiles), at 128 8 warps of 16 (the O
/// accumulator is twice as wide).
constexpr int flash_forward_rows(int) { return 128; }
/// Warps of a forward block: 4 at head size 64, 8 at 128.
constexpr int flash_forward_warps(int head_size) { return head_size == 64 ? 4 : 8; }
/// Keys per step of the forward.
constexpr int flash_key_rows() { return 64; }
/// Keys per block of the fused backward, 16 per warp: 128 at head size 64 (8 warps; half the dQ
/// partials and twice the reuse of each Q/dO tile of 64 keys), 64 at head size 128 (4 warps: 128
/// keys would need 114 KiB of shared memory, over the 99 KiB of sm_86/89/120).
constexpr int flash_backward_keys(int head_size) { return head_size == 64 ? 128 : 64; }
/// Warps of a fused backward block (16 keys each).
constexpr int flash_backward_warps(int head_size) { return flash_backward_keys(head_size) / 16; }
/// Query rows per step of the fused backward: 64 at head size 64, 32 at head size 128 (so that
/// dK and dV, 16 x 128 fp32 each per warp, stay in registers next to S^T and dP^T).
constexpr int flash_backward_rows(int head_size) { return head_size == 64 ? 64 : 32; }
/// Row stride (elements) of a bf16 tile in shared memory: 16 bytes of padding keep ldmatrix's
/// eight row reads of one 8x8 matrix on distinct banks.
constexpr int flash_tile_ld(int head_size) { return head_size + 8; }

/// Dynamic shared memory of the forward kernel: two stages of K and V tiles (cp.async double
/// buffering), the Q tile (128 rows, the size of one stage) in stage 1 until its fragments are in
/// registers, + 128 bytes for aligning the base.
constexpr size_t flash_forward_smem_bytes(int head_size) {
    return 128 + 2 * static_cast<size_t>(flash_tile_ld(head_size)) * (2 * 2 * flash_key_rows());
}
/// Dynamic shared memory of the fused backward kernel: the block's K and V tiles, two stages of Q
/// and dO tiles and of lse and D (fp32), and the dS^T tile (bf16, keys x queries), + 128.
constexpr size_t flash_backward_smem_bytes(int head_size) {
    const size_t ld = flash_tile_ld(head_size), br = flash_backward_rows(head_size),
                 bc = flash_backward_keys(head_size);
    return 128 + 2 * ld * (2 * bc + 2 * 2 * br) + 2 * bc * (br + 8) + 4 * 2 * 2 * br;
}
/// The largest dynamic shared memory any flash kernel needs at this head size (64 or 128): what a
/// device must allow per block (cudaDevAttrMaxSharedMemoryPerBlockOptin) to run this path.
/// 93,312 bytes at head size 64, 75,392 at 128 (the backward's) (both under the 99 KiB of sm_86/89/120); 0 at the
/// head sizes the kernels do not take.
inline size_t flash_attention_smem_bytes(int head_size) {
    if (head_size != 64 && head_size != 128) return 0;
    return std::max(flash_forward_smem_bytes(head_size), flash_backward_smem_bytes(head_size));
}

/// Rows of dQ partials one (b, h) holds: backward key block kb (bc = flash_backward_keys(head_size)
/// keys from kb*bc) writes the rows i in [kb*bc, T) it contributes to, so sum over kb of T - bc kb
/// (about T^2/(2 bc) + T/2: T^2/256 at head size 64, T^2/128 at 128).
inline size_t flash_dq_partial_rows(int T, int head_size) {
    const size_t bc = flash_backward_keys(head_size), nkb = (static_cast<size_t>(T) + bc - 1) / bc;
    return nkb * static_cast<size_t>(T) - bc * nkb * (nkb - 1) / 2;
}
/// The most bytes of dQ partials one backward launch may use (256 MiB): the backward runs over the
/// batch in chunks of flash_backward_batch_chunk rows, each chunk's fused kernel and dQ sum in turn
/// on the same workspace. A variable so that tests can lower it (every reader sees the same value:
/// the scratch size and the launcher agree).
inline size_t flash_dq_workspace_cap = size_t{256} << 20;
/// dQ partial bytes of one batch row (all NH heads).
inline size_t flash_dq_partial_bytes_per_batch(int T, int C, int NH) {
    return static_cast<size_t>(NH) * flash_dq_partial_rows(T, C / NH) * static_cast<size_t>(C / NH) * sizeof(float);
}
/// Batch rows per backward launch: as many as fit flash_dq_workspace_cap, at least 1, at most B.
inline int flash_backward_batch_chunk(int B, int T, int C, int NH) {
    const size_t per = flash_dq_partial_bytes_per_batch(T, C, NH);
    const size_t fit = per == 0 ? size_t(B) : flash_dq_workspace_cap / per;
    return static_cast<int>(std::max<size_t>(1, std::min<size_t>(fit, size_t(B))));
}
/// Bytes of the fp32 scratch flash_attention_backward needs: D = rowsum(dO o O) (B*NH*T floats,
/// rounded up to 256 bytes), then the dQ partials of every key block for one batch chunk
/// (flash_backward_batch_chunk rows x NH heads x flash_dq_partial_rows(T, head_size) rows of head_size
/// floats), which a second kernel sums in key-block order (deterministic, no atomics). GPT-2 124M
/// at micro-batch 32 (T 1024, 12 heads of 64): 25.5 MiB of partials per batch row, 10 rows per
/// chunk, 256.5 MiB in all with D (all 32 rows at once would be 818 MiB).
inline size_t flash_attention_backward_scratch_bytes(int B, int T, int C, int NH) {
    const size_t heads = static_cast<size_t>(B) * NH;
    const size_t delta = (heads * T * sizeof(float) + 255) / 256 * 256;
    return delta + static_cast<size_t>(flash_backward_batch_chunk(B, T, C, NH)) *
                       flash_dq_partial_bytes_per_batch(T, C, NH);
}

}  // namespace llmtrain::cuda
