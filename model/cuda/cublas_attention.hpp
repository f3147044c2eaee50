// model/cuda/cublas_attention.hpp — how model.attention = "cublas" cuts one attention call into
// query tiles, and the device workspace that takes (plain C++: CudaOps and the tests read it).
//
// The cuBLAS path (cublas_attention.cu) computes a tile of Tq query rows for all B*NH heads at once:
// fp32 scores S (B*NH, Tq, Tk) and probabilities P (B*NH, Tq, Tk) in the act dtype, Tk <= T keys.
// Tq is the largest row count whose S and P fit in model.attention_workspace_mb (rounded down to a
// multiple of 64 when it is below T, for tensor-core friendly shapes); Tq = T is llm.c's layout.
// Besides the tile, a call holds per-head copies of its inputs and outputs (fixed part below).
#pragma once
#include <cstddef>

namespace llmtrain::cuda {

/// Query tiling and workspace of one cuBLAS attention call (forward or backward).
struct CublasAttentionPlan {
    int tile_rows = 0;          ///< Tq: query rows per tile, 1 <= Tq <= T
    size_t score_bytes = 0;     ///< bytes of one tile's S (fp32) and P (act): B*NH*Tq*T*(4 + act_bytes)
    size_t workspace_bytes = 0; ///< the whole device workspace: fixed part + score_bytes (256-byte aligned parts)
};

/// The query rows a call computes (Ops::attention_forward_rows, context parallelism): window rows
/// [q0, q0 + nq) (nq < 0: the whole window, the default), their outputs at rows [o0, o0 + nq) of
/// (B,Tout,C) out / dout and (B*NH,Tout) lse; the backward then adds its dq|dk|dv to dqkv
/// (accumulate) instead of overwriting it.
struct CublasRows {
    int q0 = 0, nq = -1, Tout = 0, o0 = 0;
};

/// The plan for B, T, C, NH (model/ops.hpp's attention shapes) with act dtype of act_bytes (4 or 2)
/// bytes and a score budget of limit_mb MiB (model.attention_workspace_mb). Fixed part: forward
/// 4 act tensors (B,NH,T,HS) (q, k, v, out per head), backward 4 act (q, k, v, dout) and 3 fp32
/// (dq, dk, dv accumulators). Errors: std::invalid_argument naming model.attention_workspace_mb
/// when not even one query row of scores fits (B*NH*T*(4 + act_bytes) bytes), or limit_mb < 1.
CublasAttentionPlan cublas_attention_plan(bool backward, int B, int T, int C, int NH, size_t act_bytes,
                                          int limit_mb);

}  // namespace llmtrain::cuda
