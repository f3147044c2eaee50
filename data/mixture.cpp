// data/mixture.cpp — Megatron-LM's blending rule in integer arithmetic (see .hpp).
#include "data/mixture.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace llmtrain {

MixtureDraw::MixtureDraw(const std::vector<double>& weights) {
    if (weights.empty()) throw std::invalid_argument("mixture: no sources");
    double sum = 0;
    for (size_t k = 0; k < weights.size(); ++k) {
        if (!(weights[k] > 0) || !std::isfinite(weights[k]))
            throw std::invalid_argument("mixture: weight " + std::to_string(k) + " must be > 0 and finite, got " +
                                        std::to_string(weights[k]));
        sum += weights[k];
    }
    for (double w : weights) {
        // IEEE division and llround: the same units on every platform; at least 1 so no source starves.
        const uint64_t u = std::max<uint64_t>(1, uint64_t(std::llround(w / sum * 4294967296.0)));
        units_.push_back(u);
        denominator_ += u;
    }
}

size_t MixtureDraw::pick(const std::vector<uint64_t>& counts) const {
    unsigned __int128 n = 1;  // the sample being drawn, 1-based
    for (uint64_t c : counts) n += c;
    size_t best = 0;
    __int128 best_lag = 0;
    for (size_t k = 0; k < units_.size(); ++k) {
        // D times (w_k (n+1) - c_k): |.| < 2^96 for n < 2^64, units < 2^33.
        const __int128 lag = __int128(n * units_[k]) - __int128(counts[k]) * __int128(denominator_);
        if (k == 0 || lag > best_lag) best = k, best_lag = lag;
    }
    return best;
}

}  // namespace llmtrain
