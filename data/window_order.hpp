// data/window_order.hpp — the stream of training windows, and which of its samples a data-parallel
// rank reads, micro-batch by micro-batch.
//
// The stream: global sample i is window perm(seed, i div n_windows)[i mod n_windows], where
// perm(seed, epoch) is Fisher–Yates (Knuth, TAOCP vol. 2, Algorithm P) driven by splitmix64 (Steele,
// Lea & Flood 2014) with Lemire's unbiased bounded integers (2019), or the identity when shuffle is
// off. Every epoch is all n_windows windows; epochs follow each other without a gap (a micro-batch
// or step may span two). The stream depends only on (n_windows, shuffle, seed), never on the layout
// (dp, micro_batch_size, grad_accum_steps, pp) nor on the platform's standard library.
//
// The layout: micro-batch m (counted from a stream position `start`) of dp rank r of `world` reads
// samples start + (m*world + r)*B + [0, B) — Megatron-LM's order: the dp ranks' m-th micro-batches
// together are B*world consecutive samples. So an optimizer step of grad_accum_steps micro-batches
// per rank reads exactly global_batch_size consecutive samples, the same ones in every layout with
// that global batch, and a checkpoint needs only the stream position (samples consumed).
#pragma once
#include <cstdint>
#include <vector>

namespace llmtrain {

/// First global sample of micro-batch m, counted from stream position `start`, of dp rank `rank` of
/// `world` with B samples per micro-batch: start + (m*world + rank)*B (see the header).
inline uint64_t first_sample_of(uint64_t start, uint64_t m, int B, int rank, int world) {
    return start + (m * uint64_t(world) + uint64_t(rank)) * uint64_t(B);
}

class WindowOrder {
public:
    /// The stream over n_windows >= 1 windows. Errors: std::invalid_argument if n_windows is 0.
    WindowOrder(uint64_t n_windows, bool shuffle);
    /// The window id (in [0, n_windows)) of global sample `sample` of the stream drawn from `seed`.
    /// Keeps the last epoch's permutation, so reading the stream forward costs one shuffle per epoch.
    uint64_t window(uint64_t seed, uint64_t sample);

private:
    uint64_t n_windows_;
    bool shuffle_;
    bool have_perm_ = false;
    uint64_t perm_seed_ = 0, perm_epoch_ = 0;  // the (seed, epoch) perm_ holds
    std::vector<uint64_t> perm_;
};

/// The permutation of [0, n) for (seed, epoch): Fisher–Yates with splitmix64 seeded from both.
std::vector<uint64_t> window_permutation(uint64_t n, uint64_t seed, uint64_t epoch);

}  // namespace llmtrain
