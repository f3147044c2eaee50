// optim/lr_schedule.cpp — linear warmup, then cosine / linear decay to min_lr, constant, or
// warmup-stable-decay (see .hpp).
#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llmtrain {

LRDecay parse_lr_decay(const std::string& name) {
    if (name == "cosine") return LRDecay::cosine;
    if (name == "linear") return LRDecay::linear;
    if (name == "constant") return LRDecay::constant;
    if (name == "wsd") return LRDecay::wsd;
    throw std::invalid_argument("lr_schedule.decay: expected \"cosine\", \"linear\", \"constant\" or \"wsd\", got \"" +
                                name + "\"");
}

WSDDecayType parse_wsd_decay_type(const std::string& name) {
    if (name == "linear") return WSDDecayType::linear;
    if (name == "sqrt") return WSDDecayType::sqrt;
    if (name == "cosine") return WSDDecayType::cosine;
    throw std::invalid_argument("lr_schedule.decay_type: expected \"linear\", \"sqrt\" or \"cosine\", got \"" + name +
                                "\"");
}

int LRSchedule::wsd_decay_len() const {
    return static_cast<int>(std::lround(static_cast<double>(decay_ratio) * static_cast<double>(decay_steps)));
}

float LRSchedule::at(int step) const {
    if (step < warmup_steps) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
    if (decay == LRDecay::constant) return lr;
    if (decay == LRDecay::wsd) {
        const int D = wsd_decay_len(), S = decay_steps - D;
        if (step < S || D <= 0) return lr;  // the stable phase
        const double p = std::min(1.0, static_cast<double>(step + 1 - S) / static_cast<double>(D));
        const double w = decay_type == WSDDecayType::linear ? 1.0 - p
                         : decay_type == WSDDecayType::sqrt ? 1.0 - std::sqrt(p)
                                                            : 0.5 * (1.0 + std::cos(M_PI * p));
        return static_cast<float>(min_lr + w * (static_cast<double>(lr) - min_lr));
    }
    if (step >= decay_steps) return min_lr;
    // progress in [0, 1) through the decay phase
    const double p = static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
    const double w = decay == LRDecay::cosine ? 0.5 * (1.0 + std::cos(M_PI * p)) : 1.0 - p;
    return static_cast<float>(min_lr + w * (static_cast<double>(lr) - min_lr));
}

}  // namespace llmtrain
