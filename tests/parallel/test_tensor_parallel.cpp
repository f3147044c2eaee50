// tests/parallel/test_tensor_parallel.cpp — tensor parallelism on the CPU backend: every rank of the
// world is one TP group (tp = world size: 2 or 4, MpiComm through TpGroup) and builds, besides its
// tp GPT, a tp = 1 GPT of the same config from the same seed as the reference.
//
// Checked (docs/distributed.md "Tensor parallelism"):
//  - init: each rank's parameters are bitwise its slices of the tp = 1 parameters; the activation
//    bytes are those of the local heads and columns (docs/model.md);
//  - the loss, the logits (gathered from the group) and every parameter gradient (each rank's
//    local gradient against its slice of the tp = 1 gradient) within the tolerance below;
//  - the replicated parameters' gradients bitwise equal on every rank of the group (no reduction
//    is run for them: the ranks see identical inputs and output gradients), and the loss too;
//  - op level over the real group: the vocab-parallel embedding plus all-reduce is bitwise the
//    tp = 1 embedding;
//  - 4 ranks only: pp 2 x tp 2 (Topology's groups, PipelineStage 1F1B over 3 micro-batches, so a
//    stage holds 2 activation contexts) against the tp = 1 whole model: loss, each stage's gradient
//    slices, the tied wte's two parts summed over the pair of stages, eval loss and sampled logits;
//    once more with sequence parallelism (the stages then send each TP rank's rows).
// Sequence parallelism's own checks are in test_sequence_parallel.cpp; a first stage [0,1) and a
// last stage [1,2), with and without activation checkpointing, in test_tp_layer_ranges.cpp (both modes).
//
// Tolerance. Only the order of fp32 sums changes with tp: a row-parallel matmul (and the input
// gradient of a column-parallel one) sums tp partial dot products of K/tp terms instead of one
// of K terms (K = n_embd or 4 n_embd = 256 here), the cross-entropy's sum of exponentials is
// split in tp parts, and OpenBLAS sums a narrower product's dot products in its own order.
// Reassociating a sum of K terms changes it by at most about K·u·sum|terms| (u = 2^-24; Higham,
// "Accuracy and Stability of Numerical Algorithms" §4.2), 1.5e-5 of sum|terms| for K = 256, and
// by ~sqrt(K)·u = 1e-6 typically (rounding errors are not all of one sign). Two layers forward
// and backward chain about a dozen such sums, LayerNorm rescales by rstd without changing relative
// errors much, so a tensor's values move by a few 1e-7 to 1e-6 of its largest entry; the test
// allows kTol = 1e-5 of the largest |entry| per tensor (normwise) and 1e-5 relative on the loss
// (a mean of logsumexp values near log V = 5.7). Observed (printed on rank 0): at most 6e-7.
#include <gtest/gtest.h>

#include "parallel/pipeline.hpp"
#include "tp_test_util.hpp"

namespace llmtrain {
namespace {

using namespace tp_test;

TEST(TensorParallel, WholeModelMatchesTp1) {
    Fixture f;
    Ops& ops = *f.ops;
    const GPTConfig cfg = config();
    GPTOptions o;
    o.B = kB;
    o.T = kT;
    GPT ref(cfg, o, f.alloc);
    GPTOptions ot = o;
    ot.tp = &f.group;
    const size_t act_before = f.alloc.current(MemCategory::activations);
    GPT tp(cfg, ot, f.alloc);
    ASSERT_EQ(tp.layout().tp(), world_size());
    {  // Activation bytes for the local heads and columns (docs/model.md's table with tp = T).
        auto a256 = [](size_t b) { return (b + 255) / 256 * 256; };
        const size_t T_ = size_t(world_size()), N = kN, C = size_t(cfg.n_embd), L = size_t(cfg.n_layer);
        const size_t Ct = C / T_, Ft = 4 * C / T_, NHt = size_t(cfg.n_head) / T_, Vpt = size_t(cfg.padded_vocab_size()) / T_;
        const size_t per_layer = 3 * a256(N * C * 4) + a256(N * Ct * 4) + a256(N * 3 * Ct * 4) + 2 * a256(N * Ft * 4) +
                                 4 * a256(N * 4) + a256(size_t(kB) * NHt * kT * 4);
        const size_t want = (L + 1) * N * C * 4 + L * per_layer + N * 4 + N * C * 4 + 3 * N * 4 + N * Vpt * 4;
        EXPECT_EQ(f.alloc.current(MemCategory::activations) - act_before, want);
    }
    ref.init_params(kSeed);
    tp.init_params(kSeed);
    const ParamLayout &L1 = ref.layout(), &Lt = tp.layout();
    Worst w;
    const int u_last = cfg.n_layer + 1;
    {  // init: exactly the tp = 1 weights, sliced
        const auto p1 = host(ops, ref.params(), L1.total_numel()), pt = host(ops, tp.params(), Lt.total_numel());
        expect_slices_near(Lt, pt, L1, p1, 0, u_last, 0.0, w, "init");
    }
    // Two micro-batches of a step, gradients accumulated.
    ref.zero_grads();
    tp.zero_grads();
    std::vector<int> in(kN), tgt(kN);
    for (int i = 0; i < 2; ++i) {
        batch(i, in.data(), tgt.data());
        ref.forward_backward(in.data(), tgt.data(), 1.0f / (2 * kN));
        tp.forward_backward(in.data(), tgt.data(), 1.0f / (2 * kN));
    }
    const double loss1 = ref.take_loss_sum(), losst = tp.take_loss_sum();
    EXPECT_NEAR(losst, loss1, kLossTol * std::fabs(loss1));
    {
        double all[4] = {};
        f.group.all_gather(all, &losst, 2, DType::f32);  // a double as two floats: bits compared
        for (int r = 1; r < f.group.size(); ++r) EXPECT_EQ(all[r], all[0]) << "loss on rank " << r;
    }
    const auto g1 = host(ops, ref.grads(), L1.total_numel()), gt = host(ops, tp.grads(), Lt.total_numel());
    expect_slices_near(Lt, gt, L1, g1, 0, u_last, kTol, w, "grad");
    expect_replicated_equal(f.group, Lt, gt, 0, u_last, "grad");

    // Logits without targets: each rank's (N, Vp/tp) columns, gathered, against the tp = 1 logits.
    batch(5, in.data(), tgt.data());
    const float ev1 = ref.evaluate(in.data(), tgt.data()), evt = tp.evaluate(in.data(), tgt.data());
    EXPECT_NEAR(evt, ev1, kLossTol * std::fabs(ev1));
    const std::vector<float> row1 = ref.logits_at(in.data(), kT - 1), rowt = tp.logits_at(in.data(), kT - 1);
    ASSERT_EQ(rowt.size(), size_t(cfg.vocab_size));
    w.see(rel_err(rowt.data(), row1.data(), row1.size()), "logits_at");
    EXPECT_LE(rel_err(rowt.data(), row1.data(), row1.size()), kTol);
    const size_t Vp = size_t(cfg.padded_vocab_size()), Vpt = Vp / size_t(f.group.size());
    const auto lg1 = host(ops, ref.logits(), kN * Vp);
    const auto lgt = host(ops, tp.logits(), kN * Vpt);
    std::vector<float> parts(lgt.size() * size_t(f.group.size())), full(kN * Vp);
    f.group.all_gather(parts.data(), lgt.data(), lgt.size(), DType::f32);
    for (int r = 0; r < f.group.size(); ++r)
        for (int n = 0; n < kN; ++n)
            std::copy_n(parts.begin() + long((size_t(r) * kN + size_t(n)) * Vpt), Vpt,
                        full.begin() + long(size_t(n) * Vp + size_t(r) * Vpt));
    w.see(rel_err(full.data(), lg1.data(), full.size()), "logits");
    EXPECT_LE(rel_err(full.data(), lg1.data(), full.size()), kTol);
    // The row logits_at returned is the gathered logits' row (b = 0, T-1), bitwise.
    EXPECT_TRUE(std::equal(rowt.begin(), rowt.end(), full.begin() + long(size_t(kT - 1) * Vp)));
    w.print("whole model");
}

/// The vocab-parallel embedding over the real group: the all-reduce adds one non-zero term per
/// position, so the order of no sum changes and the result is bitwise the tp = 1 embedding.
/// (The column-parallel matmul outputs are not asserted bitwise: OpenBLAS picks its kernels by the
/// output width, and a c_fc of 4C/tp columns differs from those columns of the 4C-wide product in
/// the last bits of about 2-4% of the entries.)
TEST(TensorParallel, EmbeddingIsBitwiseTheTp1One) {
    Fixture f;
    Ops& ops = *f.ops;
    const GPTConfig cfg = config();
    const int C = cfg.n_embd, Vp = cfg.padded_vocab_size(), tp = f.group.size(), r = f.group.rank();
    const int nv = Vp / tp;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto randv = [&](size_t n) {
        std::vector<float> v(n);
        for (float& x : v) x = nd(rng);
        return v;
    };
    const auto wte = randv(size_t(Vp) * C), wpe = randv(size_t(kT) * C);
    std::vector<int> in(kN), tg(kN);
    batch(8, in.data(), tg.data());
    // Embedding: tp = 1 against this rank's rows, then the group's sum.
    std::vector<float> e1(size_t(kN) * C), et(size_t(kN) * C);
    ops.encoder_forward(e1.data(), in.data(), wte.data(), wpe.data(), kB, kT, C);
    ops.encoder_forward_vocab(et.data(), in.data(), wte.data() + size_t(r) * nv * C, wpe.data(), kB, kT, C, r * nv, nv);
    f.group.all_reduce(et.data(), et.size(), DType::f32);
    EXPECT_TRUE(et == e1) << "the vocab-parallel embedding is not bitwise the tp = 1 one";
}

TEST(TensorParallel, GptRefusesHeadsThatDoNotSplit) {
    Fixture f;
    GPTConfig cfg = config();
    cfg.n_head = 3;  // 3 heads of 16 channels (n_embd 48) do not split over 2 or 4 ranks
    cfg.n_embd = 48;
    GPTOptions o;
    o.B = kB;
    o.T = kT;
    o.tp = &f.group;
    try {
        GPT g(cfg, o, f.alloc);
        FAIL() << "no error";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos) << e.what();
    }
}

/// pp 2 x tp 2 (with or without sequence parallelism) against the tp = 1 whole model.
void pipeline_times_tp(bool sp) {
    ASSERT_EQ(world_size(), 4) << "pp 2 x tp 2: run under mpirun -np 4";
    const Topology topo(4, world_rank(), 2, 0, 2);
    const int s = topo.stage(), P = 2, m = 3;
    ASSERT_EQ(topo.dp(), 1);
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    TpGroup group(make_mpi_comm(topo.tp_group()));
    const GPTConfig cfg = config();
    GPTOptions o;
    o.B = kB;
    o.T = kT;
    GPT whole(cfg, o, alloc);  // the reference: tp = 1, one process, micro-batch by micro-batch
    whole.init_params(kSeed);
    whole.zero_grads();
    std::vector<int> in(kN), tgt(kN);
    const float dloss = 1.0f / float(kN * m);
    for (int i = 0; i < m; ++i) {
        batch(i, in.data(), tgt.data());
        whole.forward_backward(in.data(), tgt.data(), dloss);
    }
    const double want_loss = whole.take_loss_sum();
    o.l0 = s;  // one layer per stage
    o.l1 = s + 1;
    o.contexts = max_in_flight(PipelineSchedule::one_f_one_b, s, P, m);
    o.tp = &group;
    o.sequence_parallel = sp;  // then the stages exchange each TP rank's (B*T/2, C) rows
    GPT stage(cfg, o, alloc);
    stage.init_params(kSeed);
    stage.zero_grads();
    // Links between the stages' ranks of the same TP index, made pair by pair on their ranks.
    PipelineLinks links;
    const std::vector<int> pair = topo.stage_group();
    auto act = make_mpi_comm(pair), grad = make_mpi_comm(pair);
    if (s == 0) links.act_next = act.get(), links.grad_next = grad.get();
    else links.act_prev = act.get(), links.grad_prev = grad.get();
    PipelineStage pipe(stage, s, P, PipelineSchedule::one_f_one_b, links);
    pipe.warm_up();
    stage.zero_grads();
    const double loss = pipe.train(m, batch, dloss);
    if (s == P - 1) {
        EXPECT_NEAR(loss, want_loss, kLossTol * want_loss);
    } else {
        EXPECT_EQ(loss, 0.0);
    }
    Worst w;
    const ParamLayout &L1 = whole.layout(), &Lt = stage.layout();
    const auto g1 = host(*ops, whole.grads(), L1.total_numel());
    auto gt = host(*ops, stage.grads(), Lt.total_numel());
    // The tied wte: embedding part (stage 0) + LM-head part (stage 1), summed over the pair, which
    // holds the same vocabulary rows (same TP index).
    const ParamTensor& wte = Lt.find("wte");
    auto ends = make_mpi_comm(pair);
    ends->all_reduce_sum(gt.data() + wte.offset, wte.numel, DType::f32);
    for (const ParamTensor& t : Lt.tensors()) {
        const bool mine = t.unit == 1 + s || t.name == "wte" || (t.name == "wpe" && s == 0) ||
                          (t.unit == cfg.n_layer + 1 && s == P - 1);
        if (!mine) continue;
        std::vector<float> slice(t.numel);
        Lt.cut_local(t, g1.data() + L1.find(t.name).offset, slice.data());
        const double e = rel_err(gt.data() + t.offset, slice.data(), t.numel);
        w.see(e, "stage " + std::to_string(s) + " " + t.name);
        EXPECT_LE(e, kTol) << "stage " << s << " " << t.name;
    }
    // Forward only through both stages.
    batch(100, in.data(), tgt.data());
    const float ev = pipe.evaluate(in.data(), tgt.data());
    const std::vector<float> lg = pipe.logits_at(in.data(), kT - 1);
    const float ev1 = whole.evaluate(in.data(), tgt.data());
    const std::vector<float> lg1 = whole.logits_at(in.data(), kT - 1);
    if (s == P - 1) {
        EXPECT_NEAR(ev, ev1, kLossTol * ev1);
        ASSERT_EQ(lg.size(), lg1.size());
        w.see(rel_err(lg.data(), lg1.data(), lg1.size()), "pipeline logits_at");
        EXPECT_LE(rel_err(lg.data(), lg1.data(), lg1.size()), kTol);
    } else {
        EXPECT_TRUE(lg.empty());
    }
    w.print(sp ? "pp 2 x tp 2, sequence parallel" : "pp 2 x tp 2");
}

TEST(TensorParallel, PipelineTimesTp) { pipeline_times_tp(false); }
TEST(TensorParallel, PipelineTimesTpSequenceParallel) { pipeline_times_tp(true); }

}  // namespace
}  // namespace llmtrain
