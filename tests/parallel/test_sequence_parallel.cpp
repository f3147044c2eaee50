// tests/parallel/test_sequence_parallel.cpp — sequence parallelism (GPTOptions::sequence_parallel,
// Korthikanti et al. 2022) on the CPU backend: every rank of the world is one TP group (tp = world
// size: 2 or 4) and builds, besides its sequence-parallel GPT, a tp = 1 GPT and a tp GPT without
// sequence parallelism from the same seed, as references.
//
// Checked (docs/distributed.md "Tensor parallelism", "Sequence parallelism"):
//  - TensorParallel::reduce_scatter: bitwise the rank-order sum computed on the host from the
//    gathered inputs, and bitwise the block of an all-reduce;
//  - activation bytes: below the tp run's by the closed-form amount (the residual stream, ln1,
//    ln2, res2 and the LayerNorm statistics shrink from N to N/tp rows), and with every layer
//    checkpointed the whole count by formula;
//  - loss, logits and every gradient against tp = 1 within kTol (tp_test_util.hpp; derived in
//    test_tensor_parallel.cpp); against the tp run without sequence parallelism bitwise for the
//    loss, the logits and every gradient but the LayerNorms' (the same rows meet the same ops and
//    each row-parallel sum has the same rank-order terms; only the LayerNorm weight and bias
//    gradients, summed over N/tp rows and then over the group, reassociate), which are within kTol;
//  - the replicated parameters' gradients bitwise equal on every rank after the reduction;
//  - activation checkpointing (every layer): the loss and gradients bitwise those without it;
//  - refusals: B*T not a multiple of tp, and sequence parallelism without a TP group.
// (pp 2 x tp 2 with sequence parallelism is TensorParallel.PipelineTimesTpSequenceParallel; a first
// stage [0,1) and a last stage [1,2), whose act_in / act_out / dact_* are the rank's rows, with and
// without checkpointing, are Stage/TpLayerRanges.*/sp_* in test_tp_layer_ranges.cpp.)
#include <gtest/gtest.h>

#include "tp_test_util.hpp"

namespace llmtrain {
namespace {

using namespace tp_test;

bool is_layernorm(const std::string& name) { return name.find("ln_") != std::string::npos; }

TEST(SequenceParallel, ReduceScatterIsTheRankOrderSum) {
    Fixture f;
    const int P = f.group.size(), r = f.group.rank();
    const size_t n = 37;  // elements per rank's block
    std::mt19937 rng(40 + r);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> in(size_t(P) * n), out(n), all(size_t(P) * P * n);
    for (float& x : in) x = nd(rng);
    f.group.reduce_scatter(out.data(), in.data(), n, DType::f32);
    f.group.all_gather(all.data(), in.data(), size_t(P) * n, DType::f32);
    for (size_t i = 0; i < n; ++i) {
        float want = 0.0f;
        for (int q = 0; q < P; ++q) want += all[size_t(q) * P * n + size_t(r) * n + i];  // rank order
        EXPECT_EQ(out[i], want) << "element " << i;
    }
    std::vector<float> sum = in;
    f.group.all_reduce(sum.data(), sum.size(), DType::f32);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), sum.begin() + long(size_t(r) * n)));
}

TEST(SequenceParallel, WholeModelMatchesTp1) {
    Fixture f;
    Ops& ops = *f.ops;
    const GPTConfig cfg = config();
    GPTOptions o;
    o.B = kB;
    o.T = kT;
    GPT ref(cfg, o, f.alloc);
    GPTOptions ot = o;
    ot.tp = &f.group;
    auto act_now = [&] { return f.alloc.current(MemCategory::activations); };
    size_t a0 = act_now();
    GPT tp(cfg, ot, f.alloc);
    const size_t act_tp = act_now() - a0;
    GPTOptions os = ot;
    os.sequence_parallel = true;
    a0 = act_now();
    GPT sp(cfg, os, f.alloc);
    const size_t act_sp = act_now() - a0;
    os.checkpoint_layers = cfg.n_layer;
    a0 = act_now();
    GPT ck(cfg, os, f.alloc);
    const size_t act_ck = act_now() - a0;
    const size_t T_ = size_t(f.group.size()), N = kN, R = N / T_, C = size_t(cfg.n_embd), L = size_t(cfg.n_layer);
    EXPECT_EQ(sp.act_rows(), R);
    EXPECT_EQ(tp.act_rows(), N);
    {  // Activation bytes (docs/model.md, docs/distributed.md "Sequence parallelism"): per layer ln1, res2,
       // ln2 (3 of 256-aligned (rows,C)) and 4 LayerNorm statistics (rows), plus the residual stream's
       // L+1 buffers and ln_f's 2 statistics, shrink from N to R = N/tp rows; nothing else changes.
        auto a256 = [](size_t b) { return (b + 255) / 256 * 256; };
        const size_t saved = (L + 1) * (N - R) * C * 4 + L * (3 * (a256(N * C * 4) - a256(R * C * 4)) +
                                                              4 * (a256(N * 4) - a256(R * 4))) +
                             2 * (N - R) * 4;
        EXPECT_EQ(act_tp - act_sp, saved);
        // All layers recomputed: the residual stream (R rows), tokens, gathered ln_f output, its
        // statistics (R rows), this rank's logit columns and the losses.
        const size_t Vpt = size_t(cfg.padded_vocab_size()) / T_;
        EXPECT_EQ(act_ck, (L + 1) * R * C * 4 + N * 4 + N * C * 4 + 2 * R * 4 + N * Vpt * 4 + N * 4);
        if (world_rank() == 0)
            std::printf("[activations] tp %zu: %zu bytes, sequence parallel %zu (%.2fx), all checkpointed %zu\n", T_,
                        act_tp, act_sp, double(act_tp) / double(act_sp), act_ck);
    }
    std::vector<GPT*> all = {&ref, &tp, &sp, &ck};
    for (GPT* g : all) {
        g->init_params(kSeed);
        g->zero_grads();
    }
    std::vector<int> in(kN), tgt(kN);
    for (int i = 0; i < 2; ++i) {
        batch(i, in.data(), tgt.data());
        for (GPT* g : all) g->forward_backward(in.data(), tgt.data(), 1.0f / (2 * kN));
    }
    double loss[4];
    for (size_t k = 0; k < all.size(); ++k) loss[k] = all[k]->take_loss_sum();
    EXPECT_NEAR(loss[2], loss[0], kLossTol * std::fabs(loss[0]));
    EXPECT_EQ(loss[2], loss[1]) << "the sequence-parallel loss is not bitwise the tp one";
    EXPECT_EQ(loss[3], loss[2]) << "checkpointing changed the loss";
    const ParamLayout &L1 = ref.layout(), &Lt = sp.layout();
    const int u_last = cfg.n_layer + 1;
    const auto g1 = host(ops, ref.grads(), L1.total_numel()), gt = host(ops, tp.grads(), Lt.total_numel());
    const auto gs = host(ops, sp.grads(), Lt.total_numel()), gc = host(ops, ck.grads(), Lt.total_numel());
    Worst w;
    expect_slices_near(Lt, gs, L1, g1, 0, u_last, kTol, w, "grad");
    expect_replicated_equal(f.group, Lt, gs, 0, u_last, "grad");
    EXPECT_TRUE(gc == gs) << "checkpointed gradients differ from the plain ones";
    for (const ParamTensor& t : Lt.tensors()) {
        const float *a = gs.data() + t.offset, *b = gt.data() + t.offset;
        if (is_layernorm(t.name)) {
            w.see(rel_err(a, b, t.numel), "vs tp " + t.name);
            EXPECT_LE(rel_err(a, b, t.numel), kTol) << t.name;
        } else {
            EXPECT_TRUE(std::equal(a, a + t.numel, b)) << t.name << " is not bitwise the tp run's";
        }
    }
    // Forward only: eval loss, a sampled row, and the logits (every rank's whole rows, its columns).
    batch(5, in.data(), tgt.data());
    const float ev1 = ref.evaluate(in.data(), tgt.data()), evt = tp.evaluate(in.data(), tgt.data());
    const float evs = sp.evaluate(in.data(), tgt.data());
    EXPECT_NEAR(evs, ev1, kLossTol * std::fabs(ev1));
    EXPECT_EQ(evs, evt);
    const std::vector<float> row1 = ref.logits_at(in.data(), kT - 1), rowt = tp.logits_at(in.data(), kT - 1);
    const std::vector<float> rows = sp.logits_at(in.data(), kT - 1);
    w.see(rel_err(rows.data(), row1.data(), row1.size()), "logits_at");
    EXPECT_LE(rel_err(rows.data(), row1.data(), row1.size()), kTol);
    EXPECT_TRUE(rows == rowt);
    const size_t Vpt = size_t(cfg.padded_vocab_size()) / T_;
    EXPECT_TRUE(host(ops, sp.logits(), N * Vpt) == host(ops, tp.logits(), N * Vpt)) << "logits differ from tp's";
    w.print("sequence parallel, whole model");
}

TEST(SequenceParallel, RefusesRowsThatDoNotSplitAndNoGroup) {
    Fixture f;
    const GPTConfig cfg = config();
    GPTOptions o;
    o.B = 1;
    o.T = 15;  // 15 rows do not split over 2 or 4 ranks
    o.tp = &f.group;
    o.sequence_parallel = true;
    try {
        GPT g(cfg, o, f.alloc);
        FAIL() << "no error for B*T = 15";
    } catch (const std::invalid_argument& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("micro_batch_size * seq_len"), std::string::npos) << m;
        EXPECT_NE(m.find("tp = " + std::to_string(f.group.size())), std::string::npos) << m;
    }
    o.T = kT;
    o.tp = nullptr;
    try {
        GPT g(cfg, o, f.alloc);
        FAIL() << "no error without a TP group";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("tp > 1"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace llmtrain
