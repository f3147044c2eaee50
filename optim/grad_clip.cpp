// optim/grad_clip.cpp — global L2 gradient norm and the clipping factor (PyTorch clip_grad_norm_).
#include "optim/grad_clip.hpp"

#include <cmath>

namespace llmtrain {

float grad_norm(Ops& ops, const void* grads, size_t n, float* scratch) {
    ops.norm_squared(scratch, grads, n, false);
    float sq = 0.0f;
    ops.memcpy_d2h(&sq, scratch, sizeof(float));
    // Waits for the current stream only, not the whole device (no collective feeds it: the timed
    // waits of parallel/host_wait.hpp are for those).
    Event done = ops.create_event();
    ops.record_event(done);
    ops.synchronize_event(done);
    ops.destroy_event(done);
    return std::sqrt(sq);
}

float clip_scale(float norm, float grad_clip) {
    if (grad_clip <= 0.0f) return 1.0f;
    const float s = grad_clip / (norm + 1e-6f);
    return s < 1.0f ? s : 1.0f;
}

}  // namespace llmtrain
