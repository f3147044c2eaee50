// model/moe_ep_buffers.hpp — what an MoE layer keeps and borrows under expert parallelism
// (model/gpt_moe_ep.cpp; docs/parallelism.md "Expert parallelism"). With P ranks in the ep group and
// E/P = El experts each, a rank receives the rows every rank of the group routed to its El experts:
// at most P·N·k of them (dropless: every token of every rank could pick this rank's experts), so
// every buffer below is sized for Rmax = P·N·k rows and the dry run counts that bound.
#pragma once

namespace llmtrain {

/// Per layer (activations; act dtype unless noted).
struct MoeEpActs {
    int* counts = nullptr;   ///< (P·El) int32: rows from rank q for local expert j at [q·El + j]
    int* offsets = nullptr;  ///< (El+1) int32: first row of local expert j in xr (expert-major)
    void* xr = nullptr;      ///< (Rmax,C) the received rows, expert-major, by source rank within an expert
    void* gu = nullptr;      ///< (Rmax,2F) the local experts' [gate | up]
    void* h = nullptr;       ///< (Rmax,F) silu(gate) * up
};

/// Scratch shared by every layer (workspace; act dtype).
struct MoeEpWork {
    void* a = nullptr;   ///< (Rmax,C) rows in source-major order (as the exchange moves them)
    void* b = nullptr;   ///< (Rmax,C) rows in expert-major order (as the experts read them)
    void* dgu = nullptr; ///< (Rmax,2F)
    void* dh = nullptr;  ///< (Rmax,F)
};

}  // namespace llmtrain
