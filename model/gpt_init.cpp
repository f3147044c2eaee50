// model/gpt_init.cpp — weight initialization (GPT-2's scheme, for every architecture) and the
// training FLOPs per token.
//
// The init runs on the host, independent of backend, thread count and pipeline stage: one
// std::mt19937_64 stream seeded with `seed` feeds Box-Muller pairs, consumed tensor by tensor in
// layout order, row-major inside a tensor (norm parameters, biases and padded vocabulary rows draw
// nothing). Every stage draws the whole model, so the stages of a pipeline agree; and every
// tensor-parallel rank draws the whole model too and keeps its parts, so tp = T starts from the
// tp = 1 weights.
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

/// The whole-model init of `seed` into host (L.total_numel(), zeroed), L a tp = 1 layout. Each
/// tensor as its TensorInit says (model/arch.hpp chooses it); tensors split by vocabulary draw only
/// their vocab_size real rows.
void draw_init(const ParamLayout& L, uint64_t seed, float* host) {
    const GPTConfig& cfg = L.config();
    Normal normal(seed);
    const double std_resid = 0.02 / std::sqrt(2.0 * cfg.n_layer);  // the residual projections
    for (const ParamTensor& t : L.tensors()) {
        float* w = host + t.offset;
        if (t.init == TensorInit::zero || t.init == TensorInit::one) {  // norm weights 1, every bias 0
            for (size_t i = 0; i < t.numel; ++i) w[i] = t.init == TensorInit::one ? 1.0f : 0.0f;
            continue;
        }
        const double sd = t.init == TensorInit::normal_residual ? std_resid : 0.02;
        // The token table and an untied head: only the vocab_size real rows are drawn; padded rows stay 0.
        const size_t n = t.split == TPSplit::vocab ? static_cast<size_t>(cfg.vocab_size) * cfg.n_embd : t.numel;
        for (size_t i = 0; i < n; ++i) w[i] = static_cast<float>(sd * normal.next());
    }
}

}  // namespace

void GPT::init_params(uint64_t seed) {
    const ParamLayout& L = layout();
    std::vector<float> host(L.total_numel(), 0.0f);  // padding stays 0
    if (L.tp() == 1) {
        draw_init(L, seed, host.data());
    } else {  // the whole model, then this rank's parts of it
        const ParamLayout whole(config());
        std::vector<float> full(whole.total_numel(), 0.0f);
        draw_init(whole, seed, full.data());
        L.cut_local_flat(whole, full.data(), host.data());
    }
    store().load_params(host.data());
}

double flops_per_token(const GPTConfig& cfg, size_t num_parameters, int T) {
    return ArchSpec(cfg).flops_per_token(num_parameters, T);
}

}  // namespace llmtrain
