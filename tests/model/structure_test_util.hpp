// tests/model/structure_test_util.hpp — what the GPT-2 and Llama structure tests share
// (test_gpt_structure.cpp, test_llama_structure.cpp): the batch shape, seeded tokens, device reads,
// and the check that two layer ranges chained equal the whole model.
#pragma once
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {

constexpr int B = 2, T = 17, N = B * T;  ///< the micro-batch of the structure tests

/// N token ids uniform in [0, vocab_size) from seed.
inline std::vector<int> tokens(uint64_t seed, int vocab_size) {
    std::vector<int> t(N);
    std::mt19937_64 rng(seed);
    for (int& x : t) x = static_cast<int>(rng() % static_cast<uint64_t>(vocab_size));
    return t;
}

/// n fp32 values of device memory p, after the device has finished.
inline std::vector<float> host_copy(Ops& ops, const void* p, size_t n) {
    std::vector<float> v(n);
    ops.memcpy_d2h(v.data(), p, n * 4);
    ops.synchronize();
    return v;
}

/// A 4-layer cfg as one GPT and as stages [0, 2) and [2, 4) chained (act_out into act_in, dact back;
/// `second_stage` sets the second's checkpointing), all from init seed 11 on tokens(3) -> tokens(4):
/// the mean loss bitwise the whole model's, and each tensor's gradient (stage 0's + stage 1's)
/// bitwise the whole's, except `tied` (the shared token table, "" if none), whose embedding and head
/// parts sum in another order: within relative 1e-5.
inline void expect_two_stages_equal_whole(const GPTConfig& cfg, const std::function<void(GPTOptions&)>& second_stage,
                                          const std::string& tied) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = B;
    o.T = T;
    GPT whole(cfg, o, alloc);
    o.l0 = 0, o.l1 = 2;
    GPT s0(cfg, o, alloc);
    o.l0 = 2, o.l1 = 4;
    second_stage(o);
    GPT s1(cfg, o, alloc);
    for (GPT* g : {&whole, &s0, &s1}) {
        g->init_params(11);
        g->zero_grads();
    }
    const auto in = tokens(3, cfg.vocab_size), tgt = tokens(4, cfg.vocab_size);
    whole.forward_backward(in.data(), tgt.data(), 1.0f / N);
    const float loss = static_cast<float>(whole.take_loss_sum());

    int *d_in = static_cast<int*>(alloc.alloc(MemCategory::workspace, N * 4)),
        *d_tgt = static_cast<int*>(alloc.alloc(MemCategory::workspace, N * 4));
    void* dact = alloc.alloc(MemCategory::workspace, size_t(N) * cfg.n_embd * 4);
    ops->memcpy_h2d(d_in, in.data(), N * 4);
    ops->memcpy_h2d(d_tgt, tgt.data(), N * 4);
    s0.forward(d_in, nullptr, nullptr, 0.0f, true);
    s1.forward(nullptr, s0.act_out(), d_tgt, 1.0f / N, true);
    s1.backward(nullptr, dact);
    s0.backward(dact, nullptr);
    const auto losses = host_copy(*ops, s1.losses(), N);
    double sum = 0;
    for (float l : losses) sum += l;
    EXPECT_EQ(static_cast<float>(sum / N), loss);

    const size_t n = whole.layout().total_numel();
    const auto gw = host_copy(*ops, whole.grads(), n), g0 = host_copy(*ops, s0.grads(), n),
               g1 = host_copy(*ops, s1.grads(), n);
    for (const ParamTensor& t : whole.layout().tensors()) {
        std::vector<float> want(gw.begin() + t.offset, gw.begin() + t.offset + t.numel), got(t.numel);
        for (size_t i = 0; i < t.numel; ++i) got[i] = g0[t.offset + i] + g1[t.offset + i];
        if (t.name == tied) expect_close(t.name, got, want, 1e-5, 1e-9);
        else EXPECT_EQ(got, want) << t.name;
    }
    alloc.release(d_in);
    alloc.release(d_tgt);
    alloc.release(dact);
}

}  // namespace llmtrain::test
