// data/window_order.hpp — which windows a data-parallel rank reads, batch by batch.
//
// An epoch visits windows in a permutation drawn from (seed, epoch) — Fisher–Yates (Knuth, TAOCP
// vol. 2, Algorithm P) driven by splitmix64 (Steele, Lea & Flood 2014) with Lemire's unbiased
// bounded integers (2019) — or in file order when shuffle is off. Batch k of rank r takes entries
// [(k*world + r)*B, (k*world + r + 1)*B) of that order, so ranks never share a window within an
// epoch and together cover world*B*batches_per_epoch of them. The order depends only on
// (n_windows, seed, epoch, B, world), never on the platform's standard library.
#pragma once
#include <cstdint>
#include <vector>

namespace llmtrain {

class WindowOrder {
public:
    /// Errors: std::invalid_argument if B < 1, world < 1 or rank outside [0, world).
    WindowOrder(uint64_t n_windows, int B, int rank, int world, bool shuffle, uint64_t seed);
    /// floor(n_windows / (B * world)); the leftover windows of an epoch are not read.
    uint64_t batches_per_epoch() const;
    /// The B window ids (each in [0, n_windows)) of batch `batch` (< batches_per_epoch) of `epoch`.
    std::vector<uint64_t> windows(uint64_t epoch, uint64_t batch);

private:
    uint64_t n_windows_;
    int B_, rank_, world_;
    bool shuffle_;
    uint64_t seed_;
    uint64_t perm_epoch_ = UINT64_MAX;  // epoch whose permutation perm_ holds
    std::vector<uint64_t> perm_;
};

/// The permutation of [0, n) for (seed, epoch): Fisher–Yates with splitmix64 seeded from both.
std::vector<uint64_t> window_permutation(uint64_t n, uint64_t seed, uint64_t epoch);

}  // namespace llmtrain
