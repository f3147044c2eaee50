// optim/lr_schedule.hpp — learning-rate schedule: linear warmup, then decay to min_lr (cosine,
// linear, constant), or warmup-stable-decay (WSD: Hu et al. 2024, MiniCPM; Hägele et al. 2024),
// the lr held at its peak until the last decay_ratio of the run and only then decayed, in
// torchtitan's form (lr_scheduler.decay_ratio, decay_type). Every value is a closed form of the
// step and the config, so a checkpoint of the stable phase resumes into a decay that starts
// wherever the new config puts it (docs/training.md "The learning-rate schedule").
#pragma once
#include <string>

namespace llmtrain {

/// lr_schedule.decay, parsed once (parse_lr_decay).
enum class LRDecay { cosine, linear, constant, wsd };

/// lr_schedule.decay_type: the shape of WSD's decay phase over its progress p in [0, 1].
enum class WSDDecayType { linear, sqrt, cosine };

/// "cosine" | "linear" | "constant" | "wsd" -> LRDecay. Errors: std::invalid_argument naming lr_schedule.decay.
LRDecay parse_lr_decay(const std::string& name);
/// "linear" | "sqrt" | "cosine" -> WSDDecayType. Errors: std::invalid_argument naming lr_schedule.decay_type.
WSDDecayType parse_wsd_decay_type(const std::string& name);

struct LRSchedule {
    float lr = 6e-4f;          ///< peak
    float min_lr = 6e-5f;      ///< floor reached at decay_steps
    int warmup_steps = 0;      ///< lr * (step+1) / warmup_steps for step < warmup_steps
    int decay_steps = 1000;    ///< usually max_steps: the run's length
    LRDecay decay = LRDecay::cosine;
    float decay_ratio = 0.1f;  ///< wsd: the last round(decay_ratio * decay_steps) steps decay
    WSDDecayType decay_type = WSDDecayType::linear;  ///< wsd: the decay phase's shape

    /// Learning rate for 0-based `step`. Cosine (Loshchilov & Hutter 2017, no restarts):
    /// min_lr + 0.5 (lr - min_lr)(1 + cos(pi * (step - warmup)/(decay_steps - warmup))), min_lr after.
    /// WSD (torchtitan's linear_warmup_stable_decay, min_lr absolute): with D = wsd_decay_len(),
    /// S = decay_steps - D, lr for warmup <= step < S, then p = min(1, (step + 1 - S) / D) and
    /// min_lr + f(p) (lr - min_lr), f = 1 - p (linear), 1 - sqrt(p) (sqrt) or (1 + cos(pi p)) / 2
    /// (cosine): the run's last step (decay_steps - 1) is at min_lr.
    float at(int step) const;
    /// WSD's decay length in steps: round(decay_ratio * decay_steps) (halves away from zero).
    int wsd_decay_len() const;
};

}  // namespace llmtrain
