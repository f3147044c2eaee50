// app/plan/plan_times.cpp — measured and FLOP-derived layer times for the planner (see plan_times.hpp).
#include "app/plan/plan_times.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <vector>

#include "app/state/model_state.hpp"
#include "model/allocator.hpp"
#include "model/arch.hpp"
#include "model/bf16.hpp"
#include "model/gpt.hpp"
#include "parallel/partition.hpp"

namespace llmtrain {

namespace {

/// Median seconds of reps calls of f (after one untimed call), the backend synchronized around each.
double median_seconds(Ops& ops, int reps, const std::function<void()>& f) {
    f();
    ops.synchronize();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        ops.synchronize();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
    return t[size_t(reps / 2)];
}

/// Forward and backward seconds of one micro-batch through layers [l0, l1) of a copy of the model
/// with n_layer layers, `ckpt` of them recomputed.
struct RangeTimes {
    double fwd, bwd;
};

RangeTimes time_range(const GPTConfig& g, int B, int T, int l0, int l1, int ckpt, Ops& ops, int reps) {
    Allocator alloc(ops);
    GPTOptions o;
    o.B = B;
    o.T = T;
    o.l0 = l0;
    o.l1 = l1;
    o.checkpoint_layers = ckpt;
    GPT gpt(g, o, alloc);
    gpt.init_params(1337);
    const size_t BT = size_t(B) * size_t(T), act = BT * size_t(g.n_embd) * dtype_size(ops.act_dtype());
    // Token ids 0..V-1 in a fixed pattern, an activation and gradient of zeros: timing, not values.
    std::vector<int> ids(BT);
    for (size_t i = 0; i < BT; ++i) ids[i] = int((i * 7919) % size_t(g.vocab_size));
    int* tokens = static_cast<int*>(alloc.alloc(MemCategory::activations, BT * sizeof(int)));
    ops.memcpy_h2d(tokens, ids.data(), BT * sizeof(int));
    void* in = alloc.alloc(MemCategory::activations, act);
    void* dout = alloc.alloc(MemCategory::activations, act);
    void* din = alloc.alloc(MemCategory::activations, act);
    ops.memset(in, 0, act);
    ops.memset(dout, 0, act);
    if (g.moe_experts > 0 && l0 > 0) {
        // A mixture of experts routes by its input: zeros would score every expert alike and send every
        // token to the same top_k. A fixed pseudo-random activation (unit scale) routes as a trained
        // model's roughly evenly, so the timed experts see about B*T*top_k/E rows each.
        std::vector<float> x(BT * size_t(g.n_embd));
        uint32_t h = 2463534242u;
        for (float& v : x) {
            h ^= h << 13, h ^= h >> 17, h ^= h << 5;  // xorshift32
            v = float(h) / 4294967296.0f * 2.0f - 1.0f;
        }
        if (ops.act_dtype() == DType::f32) {
            ops.memcpy_h2d(in, x.data(), act);
        } else {
            std::vector<uint16_t> b(x.size());
            for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
            ops.memcpy_h2d(in, b.data(), act);
        }
    }
    const bool last = l1 == g.n_layer;
    RangeTimes r{};
    const double pair = median_seconds(ops, reps, [&] {
        gpt.forward(tokens, in, tokens, 1.0f / float(BT), true);
        gpt.backward(last ? nullptr : dout, l0 > 0 ? din : nullptr);
    });
    r.fwd = median_seconds(ops, reps, [&] { gpt.forward(tokens, in, tokens, 1.0f / float(BT), false); });
    r.bwd = pair - r.fwd;  // a training forward costs an inference one (+ the logit gradient at the head)
    alloc.release(tokens);
    alloc.release(in);
    alloc.release(dout);
    alloc.release(din);
    return r;
}

}  // namespace

LayerTimes measure_layer_times(const Config& cfg, Ops& ops, int reps) {
    if (reps < 1) throw std::invalid_argument("measure_layer_times: expected reps >= 1, got " + std::to_string(reps));
    GPTConfig g = gpt_config_of(cfg);
    const int B = cfg.training.micro_batch_size, T = cfg.model.seq_len;
    g.n_layer = 4;  // a layer's cost does not depend on how many there are
    const RangeTimes mid = time_range(g, B, T, 1, 3, 0, ops, reps);
    const RangeTimes mid_ckpt = time_range(g, B, T, 1, 3, 2, ops, reps);
    const RangeTimes first = time_range(g, B, T, 0, 1, 0, ops, reps);
    const RangeTimes last = time_range(g, B, T, 3, 4, 0, ops, reps);
    LayerTimes t;
    t.layer_fwd = mid.fwd / 2;
    t.layer_bwd = mid.bwd / 2;
    t.layer_recompute = std::max(0.0, (mid_ckpt.bwd - mid.bwd) / 2);
    t.embed_fwd = std::max(0.0, first.fwd - t.layer_fwd);
    t.embed_bwd = std::max(0.0, first.bwd - t.layer_bwd);
    t.head_fwd = std::max(0.0, last.fwd - t.layer_fwd);
    t.head_bwd = std::max(0.0, last.bwd - t.layer_bwd);
    {  // AdamW over one layer's parameters, as the run steps them (fp32 master with bf16 params)
        Allocator alloc(ops);
        const size_t n = ParamLayout(g).units()[1].numel;
        const bool master = ops.act_dtype() != DType::f32;
        const size_t es = dtype_size(ops.act_dtype());
        void* p = alloc.alloc(MemCategory::params, n * es);
        void* gr = alloc.alloc(MemCategory::grads, n * es);
        auto* mv = static_cast<float*>(alloc.alloc(MemCategory::optimizer, (master ? 3 : 2) * n * sizeof(float)));
        ops.memset(p, 0, n * es);
        ops.memset(gr, 0, n * es);
        ops.memset(mv, 0, (master ? 3 : 2) * n * sizeof(float));
        int step = 0;
        const double s = median_seconds(ops, reps, [&] {
            ops.adamw_update(p, master ? mv + 2 * n : nullptr, gr, mv, mv + n, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                             ++step, 0);
        });
        t.adam_per_param = s / double(n);
        alloc.release(p);
        alloc.release(gr);
        alloc.release(mv);
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "measured on the %s backend (%s), micro-batch %d x %d, median of %d", ops.name(),
                  cfg.training.precision.c_str(), B, T, reps);
    t.source = buf;
    return t;
}

LayerTimes flops_layer_times(const Config& cfg, double device_tflops, double memory_gbps) {
    if (!(device_tflops > 0) || !(memory_gbps > 0))
        throw std::invalid_argument("flops_layer_times: expected positive --device-tflops and --device-gbps, got " +
                                    std::to_string(device_tflops) + " and " + std::to_string(memory_gbps));
    const int B = cfg.training.micro_batch_size, T = cfg.model.seq_len;
    const GPTConfig g = gpt_config_of(cfg);
    // A mixture of experts' layer counts its active parameters, as the run's MFU (stage_costs).
    const StageCosts c = stage_costs(g, B, T);
    const double rate = device_tflops * 1e12;  // FLOP/s
    LayerTimes t;
    t.layer_fwd = c.layer / 3 / rate;  // training FLOPs are forward + backward = 3 x forward
    t.layer_bwd = 2 * c.layer / 3 / rate;
    t.layer_recompute = t.layer_fwd;
    t.embed_fwd = c.embedding / 3 / rate;
    t.embed_bwd = 2 * c.embedding / 3 / rate;
    t.head_fwd = c.head / 3 / rate;
    t.head_bwd = 2 * c.head / 3 / rate;
    t.adam_per_param = 28.0 / (memory_gbps * 1e9);
    char buf[160];
    std::snprintf(buf, sizeof buf, "from FLOPs at %g TFLOP/s sustained, AdamW at 28 B/parameter over %g GB/s "
                  "(on paper), micro-batch %d x %d", device_tflops, memory_gbps, B, T);
    t.source = buf;
    return t;
}

}  // namespace llmtrain
