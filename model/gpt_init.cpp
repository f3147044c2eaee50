// model/gpt_init.cpp — weight initialization (GPT-2's scheme, for every architecture) and the
// training FLOPs per token.
//
// The init runs on the host, independent of backend, thread count and pipeline stage: one
// std::mt19937_64 stream seeded with `seed` feeds Box-Muller pairs, consumed tensor by tensor in
// layout order, row-major inside a tensor (norm parameters, biases and padded vocabulary rows draw
// nothing). Every rank draws the whole model's stream and keeps only the elements its parameter
// store owns (its ZeRO shard, TP part, pipeline stage: ParamStore::own_ranges), so every layout
// starts from the tp = 1 weights bit for bit and no rank holds a whole-model host copy
// (docs/checkpoints.md "By shard").
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/arch.hpp"
#include "model/gpt.hpp"

namespace llmtrain {

namespace {

/// Standard normal samples by the Box-Muller transform from 53-bit uniforms in (0, 1].
class Normal {
public:
    explicit Normal(uint64_t seed) : rng_(seed) {}
    double next() {
        if (have_spare_) {
            have_spare_ = false;
            return spare_;
        }
        const double u1 = static_cast<double>((rng_() >> 11) + 1) * 0x1.0p-53;  // (0, 1]: log is finite
        const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
        const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
        spare_ = r * std::sin(a);
        have_spare_ = true;
        return r * std::cos(a);
    }

private:
    std::mt19937_64 rng_;
    double spare_ = 0.0;
    bool have_spare_ = false;
};

/// One stretch of a tensor's draws that lands in the caller's values: draws [full, full + count)
/// of the whole tensor go to out[at, at + count).
struct Target {
    size_t full, count, at;
};

/// The init of `seed` of the elements of `ranges` (flat ranges of L, ascending) into out (their
/// total numel, back to back, zeroed). Every tensor of the whole model (tp = 1, layout order) is
/// drawn as its TensorInit says (model/arch.hpp chooses it); tensors split by vocabulary draw only
/// their vocab_size real rows. The draws of elements outside `ranges` are made and dropped, so each
/// element gets the same value for any ranges, tp or pipeline stage, and no host copy of more than
/// the ranges is made.
void draw_init(const ParamLayout& L, const std::vector<FlatRange>& ranges, uint64_t seed, float* out) {
    const GPTConfig& cfg = L.config();
    Normal normal(seed);
    const double std_resid = 0.02 / std::sqrt(2.0 * cfg.n_layer);  // the residual projections
    std::vector<Target> targets;
    for (const ParamTensor& t : L.tensors()) {
        targets.clear();  // where this tensor's draws go, ascending in `full` (local -> whole is monotone)
        size_t at = 0;
        for (const FlatRange& r : ranges) {
            const size_t lo = std::max(t.offset, r.offset), hi = std::min(t.offset + t.numel, r.offset + r.numel);
            if (lo < hi)
                for (const TPRun& run : L.local_runs(t, lo - t.offset, hi - t.offset))
                    targets.push_back({run.full, run.count, at + (t.offset + run.local - r.offset)});
            at += r.numel;
        }
        if (t.init == TensorInit::zero || t.init == TensorInit::one) {  // norm weights 1, every bias 0
            for (const Target& g : targets) std::fill_n(out + g.at, g.count, t.init == TensorInit::one ? 1.0f : 0.0f);
            continue;
        }
        const double sd = t.init == TensorInit::normal_residual ? std_resid : 0.02;
        // The token table and an untied head: only the vocab_size real rows are drawn; padded rows stay 0.
        size_t n = t.split == TPSplit::vocab ? static_cast<size_t>(cfg.vocab_size) * cfg.n_embd : 1;
        if (t.split != TPSplit::vocab)
            for (int64_t d : t.full_shape) n *= static_cast<size_t>(d);
        size_t k = 0;
        for (size_t i = 0; i < n; ++i) {
            const float x = static_cast<float>(sd * normal.next());
            while (k < targets.size() && i >= targets[k].full + targets[k].count) ++k;
            if (k < targets.size() && i >= targets[k].full) out[targets[k].at + (i - targets[k].full)] = x;
        }
    }
}

}  // namespace

void GPT::init_params(uint64_t seed) {
    const std::vector<FlatRange> own = store().own_ranges();  // a ZeRO rank: its shard only
    size_t n = 0;
    for (const FlatRange& r : own) n += r.numel;
    std::vector<float> values(n, 0.0f);  // padding stays 0
    draw_init(layout(), own, seed, values.data());
    store().load_shard(values.data());
}

double flops_per_token(const GPTConfig& cfg, size_t num_parameters, int T) {
    return ArchSpec(cfg).flops_per_token(num_parameters, T);
}

}  // namespace llmtrain
