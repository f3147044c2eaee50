// tests/parallel/test_tp_layer_ranges.cpp — a pipeline stage's layer range [l0, l1) with tensor
// parallelism, with and without sequence parallelism, against the tp = 1 stage: every rank of the
// world is one TP group (tp = world size: 2 or 4, MpiComm through TpGroup) and builds, besides its
// tp GPT, a tp = 1 GPT of the same range from the same seed. One parameterised test over the mode
// (tensor parallel, sequence parallel) and the range: a first stage [0,1) (forward from tokens,
// backward from a fixed dact_out) and a last stage [1,2) (forward from a fixed act_in, backward from
// the loss); inside, without and then with activation checkpointing (one layer recomputed).
//
// Checked for each case (docs/distributed.md "Tensor parallelism", "Sequence parallelism"):
//  - the checkpointed layer count, and act_rows(): B*T, or B*T/tp with sequence parallelism (then
//    act_in / act_out / dact_* are this rank's contiguous rows of the tp = 1 stage's (B*T, C));
//  - within kTol of the tp = 1 stage (tp_test_util.hpp; derived in test_tensor_parallel.cpp):
//    act_out (first stage) or the per-position losses (last stage, kLossTol), dact_in (last stage),
//    every parameter gradient this stage touches against its slice of the tp = 1 gradient, and at
//    the last stage the logit row a pipeline samples from (logit_row, gathered over the group);
//  - the replicated parameters' gradients bitwise equal on every rank of the group;
//  - checkpointed gradients bitwise the plain ones (the recomputation repeats the same ops and the
//    same collectives).
// The whole model, the embedding op, refusals and pp 2 x tp 2 are in test_tensor_parallel.cpp and
// test_sequence_parallel.cpp.
#include <gtest/gtest.h>

#include "tp_test_util.hpp"

namespace llmtrain {
namespace {

using namespace tp_test;

/// The fixed inputs of a layer-range test, on the device: act_in (kN,C) ~ N(0,1) and dact_out
/// (kN,C) ~ N(0,1e-6) from seed 77, batch 3's tokens and targets (kN ints each), and dact_in
/// (kN,C) scratch; with `rows` > 0 also act_in_r and dact_out_r, rows [row0, row0 + rows) of act_in
/// and dact_out (a sequence-parallel rank's share). Released with the object.
struct StageIO {
    Allocator& alloc;
    void *act_in, *dact_out, *dact_in, *act_in_r = nullptr, *dact_out_r = nullptr;
    int *tok, *tgt;

    StageIO(Allocator& a, Ops& ops, size_t C, size_t row0 = 0, size_t rows = 0) : alloc(a) {
        const size_t NC = size_t(kN) * C;
        std::mt19937 rng(77);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> act_in_h(NC), dact_out_h(NC);
        for (float& x : act_in_h) x = nd(rng);
        for (float& x : dact_out_h) x = 1e-3f * nd(rng);
        act_in = upload(ops, act_in_h.data(), NC * 4);
        dact_out = upload(ops, dact_out_h.data(), NC * 4);
        dact_in = alloc.alloc(MemCategory::workspace, NC * 4);
        if (rows > 0) {
            act_in_r = upload(ops, act_in_h.data() + row0 * C, rows * C * 4);
            dact_out_r = upload(ops, dact_out_h.data() + row0 * C, rows * C * 4);
        }
        std::vector<int> in(kN), tg(kN);
        batch(3, in.data(), tg.data());
        tok = static_cast<int*>(upload(ops, in.data(), kN * 4));
        tgt = static_cast<int*>(upload(ops, tg.data(), kN * 4));
    }
    ~StageIO() {
        for (void* p : {act_in, dact_out, dact_in, act_in_r, dact_out_r, static_cast<void*>(tok), static_cast<void*>(tgt)})
            if (p != nullptr) alloc.release(p);
    }
    StageIO(const StageIO&) = delete;
    StageIO& operator=(const StageIO&) = delete;

private:
    void* upload(Ops& ops, const void* h, size_t bytes) {
        void* p = alloc.alloc(MemCategory::workspace, bytes);
        ops.memcpy_h2d(p, h, bytes);
        return p;
    }
};

struct StageCase {
    bool sequence_parallel;
    int l0, l1;
};
/// How gtest prints a case (in failures and --gtest_list_tests): "sequence parallel [1,2)".
void PrintTo(const StageCase& c, std::ostream* os) {
    *os << (c.sequence_parallel ? "sequence parallel" : "tensor parallel") << " [" << c.l0 << "," << c.l1 << ")";
}

class TpLayerRanges : public testing::TestWithParam<StageCase> {};

/// The stage [l0, l1) at tp = 1 and at tp (with sequence parallelism or not), checkpoint_layers 0
/// then 1: forward from tokens (l0 = 0) or a fixed act_in, backward from the loss (last stage) or a
/// fixed dact_out.
TEST_P(TpLayerRanges, MatchTp1AndCheckpointBitwise) {
    const auto [sp, l0, l1] = GetParam();
    Fixture f;
    Ops& ops = *f.ops;
    const GPTConfig cfg = config();
    const size_t C = size_t(cfg.n_embd);
    // The tp stage's activation rows: all kN, or with sequence parallelism this rank's R from row0.
    const size_t R = sp ? size_t(kN) / size_t(f.group.size()) : size_t(kN);
    const size_t row0 = sp ? size_t(f.group.rank()) * R : 0;
    StageIO io(f.alloc, ops, C, row0, sp ? R : 0);
    void* act_in_tp = sp ? io.act_in_r : io.act_in;  // what the tp stage is given
    void* dact_out_tp = sp ? io.dact_out_r : io.dact_out;
    const bool last = l1 == cfg.n_layer;
    char label[64];
    std::snprintf(label, sizeof label, "%s[%d,%d)", sp ? "sequence parallel " : "", l0, l1);
    Worst w;
    std::vector<float> plain_grads;  // the tp stage's gradients without checkpointing
    for (int ckpt : {0, 1}) {
        const std::string what = std::string(label) + " ckpt " + std::to_string(ckpt);
        SCOPED_TRACE(what);
        GPTOptions o;
        o.B = kB;
        o.T = kT;
        o.l0 = l0;
        o.l1 = l1;
        o.checkpoint_layers = ckpt;
        GPT ref(cfg, o, f.alloc);
        GPTOptions ot = o;
        ot.tp = &f.group;
        ot.sequence_parallel = sp;
        GPT tp(cfg, ot, f.alloc);
        ASSERT_EQ(tp.num_checkpointed_layers(), ckpt);
        ASSERT_EQ(tp.act_rows(), R);
        std::vector<float> out1, outt, dact1, dactt;
        for (GPT* g : {&ref, &tp}) {
            const bool t = g == &tp;
            g->init_params(kSeed);
            g->zero_grads();
            g->forward(l0 == 0 ? io.tok : nullptr, t ? act_in_tp : io.act_in, last ? io.tgt : nullptr, 1.0f / kN, true);
            if (!last) (t ? outt : out1) = host(ops, g->act_out(), g->act_rows() * C);
            g->backward(last ? nullptr : (t ? dact_out_tp : io.dact_out), io.dact_in);
            if (l0 > 0) (t ? dactt : dact1) = host(ops, io.dact_in, g->act_rows() * C);
        }
        if (last) {
            const auto a = host(ops, ref.losses(), kN), b = host(ops, tp.losses(), kN);
            w.see(rel_err(b.data(), a.data(), kN), what + " losses");
            EXPECT_LE(rel_err(b.data(), a.data(), kN), kLossTol);
        } else {  // this rank's rows of the tp = 1 output (all of them without sequence parallelism)
            ASSERT_EQ(outt.size(), R * C);
            const double e = rel_err(outt.data(), out1.data() + row0 * C, R * C);
            w.see(e, what + " act_out");
            EXPECT_LE(e, kTol);
        }
        if (l0 > 0) {
            ASSERT_EQ(dactt.size(), R * C);
            const double e = rel_err(dactt.data(), dact1.data() + row0 * C, R * C);
            w.see(e, what + " dact_in");
            EXPECT_LE(e, kTol);
        }
        const ParamLayout &L1 = ref.layout(), &Lt = tp.layout();
        const auto g1 = host(ops, ref.grads(), L1.total_numel()), gt = host(ops, tp.grads(), Lt.total_numel());
        // The units this stage touches: its layers, unit 0 (first stage: wte, wpe; last: the LM
        // head's wte) and ln_f (last stage).
        for (const ParamTensor& t : Lt.tensors()) {
            const bool mine = (t.unit >= 1 + l0 && t.unit <= l1) || (t.unit == 0 && (l0 == 0 || last)) ||
                              (t.unit == cfg.n_layer + 1 && last);
            if (!mine) continue;
            std::vector<float> slice(t.numel);
            Lt.cut_local(t, g1.data() + L1.find(t.name).offset, slice.data());
            const double e = rel_err(gt.data() + t.offset, slice.data(), t.numel);
            w.see(e, what + " " + t.name);
            EXPECT_LE(e, kTol) << t.name;
        }
        expect_replicated_equal(f.group, Lt, gt, 0, cfg.n_layer + 1, what);
        if (last) {  // a pipeline's sampling path: one row of logits, gathered over the group
            const size_t Vp = size_t(cfg.padded_vocab_size());
            float* row = static_cast<float*>(f.alloc.alloc(MemCategory::workspace, Vp * 4));
            std::vector<float> r1, rt;
            for (GPT* g : {&ref, &tp}) {
                g->forward(nullptr, g == &tp ? act_in_tp : io.act_in, nullptr, 0.0f, false);
                g->logit_row(0, kT - 2, row);
                (g == &ref ? r1 : rt) = host(ops, row, Vp);
            }
            f.alloc.release(row);
            w.see(rel_err(rt.data(), r1.data(), Vp), what + " logit_row");
            EXPECT_LE(rel_err(rt.data(), r1.data(), Vp), kTol);
        }
        if (ckpt == 0) plain_grads = gt;
        else EXPECT_TRUE(gt == plain_grads) << "checkpointed gradients differ from the plain ones";
    }
    w.print((std::string("layer range ") + label).c_str());
}

INSTANTIATE_TEST_SUITE_P(Stage, TpLayerRanges,
                         testing::Values(StageCase{false, 0, 1}, StageCase{false, 1, 2},  // tensor parallel
                                         StageCase{true, 0, 1}, StageCase{true, 1, 2}),   // sequence parallel
                         [](const testing::TestParamInfo<StageCase>& i) {
                             std::string name = i.param.sequence_parallel ? "sp" : "tp";
                             name += "_layers" + std::to_string(i.param.l0) + "to" + std::to_string(i.param.l1);
                             return name;
                         });

}  // namespace
}  // namespace llmtrain
