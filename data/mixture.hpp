// data/mixture.hpp — which source each sample of a mixture's stream comes from.
//
// Megatron-LM's blending (BlendedDataset, helpers.cpp build_blending_indices; nanotron's Nanosets
// use the same): sample n of the mixture goes to the source whose count lags its share most, the
// source k maximising w_k (n + 1) - c_k, where c_k is how many of samples [0, n) it got (ties to
// the lowest k). It is deterministic, needs no random numbers, and keeps every prefix of the
// stream close to the weights: c_k - n w_k stays within (-S, 1) for S sources (docs/data.md
// "Sources" has the measured spread). Here the weights are integers W_k (w_k scaled to 2^32 and
// rounded, D = sum W_k) and the comparison is exact 128-bit integer arithmetic, so the draw is
// the same on every platform.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace llmtrain {

class MixtureDraw {
public:
    /// Weights > 0 and finite, any scale (normalised here). Errors: std::invalid_argument when the
    /// list is empty or a weight is not > 0 and finite (the message names its index).
    explicit MixtureDraw(const std::vector<double>& weights);
    /// The source of the next sample, given counts[k] = the samples already drawn from source k
    /// (counts.size() == sources()); n = the sum of counts.
    size_t pick(const std::vector<uint64_t>& counts) const;
    size_t sources() const { return units_.size(); }
    /// W_k: weight k in units of 1 / denominator().
    const std::vector<uint64_t>& units() const { return units_; }
    uint64_t denominator() const { return denominator_; }

private:
    std::vector<uint64_t> units_;
    uint64_t denominator_ = 0;
};

}  // namespace llmtrain
