// optim/grad_clip.hpp — global gradient norm and clipping factor.
#pragma once
#include <cstddef>

#include "model/ops.hpp"

namespace llmtrain {

/// L2 norm of n act-dtype gradients (Ops::norm_squared into the device fp32 scalar `scratch`,
/// then copied to the host: the host waits for the current stream).
float grad_norm(Ops& ops, const void* grads, size_t n, float* scratch);

/// Factor that scales the gradients to norm at most grad_clip (PyTorch clip_grad_norm_:
/// grad_clip / (norm + 1e-6) when that is < 1, else 1). grad_clip <= 0 disables clipping.
float clip_scale(float norm, float grad_clip);

}  // namespace llmtrain
