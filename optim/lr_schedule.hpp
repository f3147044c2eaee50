// optim/lr_schedule.hpp — learning-rate schedule: linear warmup, then decay to min_lr.
#pragma once
#include <string>

namespace llmtrain {

/// lr_schedule.decay, parsed once (parse_lr_decay).
enum class LRDecay { cosine, linear, constant };

/// "cosine" | "linear" | "constant" -> LRDecay. Errors: std::invalid_argument naming lr_schedule.decay.
LRDecay parse_lr_decay(const std::string& name);

struct LRSchedule {
    float lr = 6e-4f;          ///< peak
    float min_lr = 6e-5f;      ///< floor reached at decay_steps
    int warmup_steps = 0;      ///< lr * (step+1) / warmup_steps for step < warmup_steps
    int decay_steps = 1000;    ///< usually max_steps
    LRDecay decay = LRDecay::cosine;

    /// Learning rate for 0-based `step`. Cosine (Loshchilov & Hutter 2017, no restarts):
    /// min_lr + 0.5 (lr - min_lr)(1 + cos(pi * (step - warmup)/(decay_steps - warmup))), min_lr after.
    float at(int step) const;
};

}  // namespace llmtrain
