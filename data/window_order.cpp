// data/window_order.cpp — deterministic epoch permutations and data-parallel sharding (see .hpp).
#include "data/window_order.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace llmtrain {

namespace {

// splitmix64's output function: a bijective 64-bit mixer (Steele, Lea & Flood 2014).
uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct SplitMix64 {
    uint64_t state;
    uint64_t next() { return mix64(state += 0x9E3779B97F4A7C15ull); }
    // Uniform in [0, range), range >= 1, without modulo bias (Lemire 2019, "Fast random integer
    // generation in an interval").
    uint64_t below(uint64_t range) {
        unsigned __int128 m = static_cast<unsigned __int128>(next()) * range;
        uint64_t low = static_cast<uint64_t>(m);
        if (low < range) {
            const uint64_t threshold = (0 - range) % range;
            while (low < threshold) {
                m = static_cast<unsigned __int128>(next()) * range;
                low = static_cast<uint64_t>(m);
            }
        }
        return static_cast<uint64_t>(m >> 64);
    }
};

}  // namespace

std::vector<uint64_t> window_permutation(uint64_t n, uint64_t seed, uint64_t epoch) {
    std::vector<uint64_t> perm(n);
    for (uint64_t i = 0; i < n; ++i) perm[i] = i;
    SplitMix64 rng{mix64(mix64(seed) ^ epoch)};
    for (uint64_t i = n; i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
    return perm;
}

WindowOrder::WindowOrder(uint64_t n_windows, int B, int rank, int world, bool shuffle, uint64_t seed)
    : n_windows_(n_windows), B_(B), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed) {
    if (B < 1) throw std::invalid_argument("WindowOrder: B must be >= 1, got " + std::to_string(B));
    if (world < 1 || rank < 0 || rank >= world)
        throw std::invalid_argument("WindowOrder: rank " + std::to_string(rank) + " is outside world " +
                                    std::to_string(world));
}

uint64_t WindowOrder::batches_per_epoch() const {
    return n_windows_ / (static_cast<uint64_t>(B_) * static_cast<uint64_t>(world_));
}

std::vector<uint64_t> WindowOrder::windows(uint64_t epoch, uint64_t batch) {
    if (batch >= batches_per_epoch())
        throw std::out_of_range("WindowOrder: batch " + std::to_string(batch) + " >= batches_per_epoch " +
                                std::to_string(batches_per_epoch()));
    if (shuffle_ && perm_epoch_ != epoch) {
        perm_ = window_permutation(n_windows_, seed_, epoch);
        perm_epoch_ = epoch;
    }
    const uint64_t first = (batch * world_ + rank_) * static_cast<uint64_t>(B_);
    std::vector<uint64_t> ids(B_);
    for (int i = 0; i < B_; ++i) ids[i] = shuffle_ ? perm_[first + i] : first + i;
    return ids;
}

}  // namespace llmtrain
