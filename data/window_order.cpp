// data/window_order.cpp — the window stream: deterministic epoch permutations (see .hpp).
#include "data/window_order.hpp"

#include <stdexcept>
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

WindowOrder::WindowOrder(uint64_t n_windows, bool shuffle) : n_windows_(n_windows), shuffle_(shuffle) {
    if (n_windows == 0) throw std::invalid_argument("WindowOrder: the stream needs at least one window");
}

uint64_t WindowOrder::window(uint64_t seed, uint64_t sample) {
    const uint64_t epoch = sample / n_windows_, at = sample % n_windows_;
    if (!shuffle_) return at;
    if (!have_perm_ || perm_seed_ != seed || perm_epoch_ != epoch) {
        perm_ = window_permutation(n_windows_, seed, epoch);
        have_perm_ = true;
        perm_seed_ = seed;
        perm_epoch_ = epoch;
    }
    return perm_[at];
}

}  // namespace llmtrain
