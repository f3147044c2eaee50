// optim/lr_schedule.cpp — linear warmup, then cosine / linear decay to min_lr, or constant.
#include "optim/lr_schedule.hpp"

#include <cmath>
#include <stdexcept>

namespace llmtrain {

LRDecay parse_lr_decay(const std::string& name) {
    if (name == "cosine") return LRDecay::cosine;
    if (name == "linear") return LRDecay::linear;
    if (name == "constant") return LRDecay::constant;
    throw std::invalid_argument("lr_schedule.decay: expected \"cosine\", \"linear\" or \"constant\", got \"" + name +
                                "\"");
}

float LRSchedule::at(int step) const {
    if (step < warmup_steps) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
    if (decay == LRDecay::constant) return lr;
    if (step >= decay_steps) return min_lr;
    // progress in [0, 1) through the decay phase
    const double p = static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
    const double w = decay == LRDecay::cosine ? 0.5 * (1.0 + std::cos(M_PI * p)) : 1.0 - p;
    return static_cast<float>(min_lr + w * (static_cast<double>(lr) - min_lr));
}

}  // namespace llmtrain
