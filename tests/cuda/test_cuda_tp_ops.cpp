// tests/cuda/test_cuda_tp_ops.cpp — the CUDA backend's vocab-parallel ops (tensor parallelism, issue
// 23): encoder_forward_vocab / encoder_backward_vocab and classifier_partial / classifier_finish.
// One process plays every rank of a TP group: a padded vocab (Vp 128) is split into pieces, each
// rank runs the op on its piece, and the pieces are put back together as the group's collectives
// would (stats concatenated in rank order, embedding outputs summed in rank order). The references
// need no vocab-parallel op of another backend:
//  - the embedding against the same backend's whole-vocabulary encoder, bitwise (one non-zero term
//    per position; each dwte row summed by the same bucket in the same order);
//  - the cross-entropy against the same backend's fused_classifier and the CPU backend's, and its
//    stats against a float64 evaluation of their definition, within the tolerances stated below;
//  - repeated runs, in three thread and block orders of the emulator, bitwise.
// Shapes as test_cuda_ops.cpp: B 3, T 17 (N 51 rows), n_embd 48, vocab 101 (and 90) padded to 128.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

constexpr int B = 3, T = 17, C = 48, Vp = 128, N = B * T;

/// A split of the padded vocab [0, Vp) among ranks: rank r holds [bounds[r], bounds[r + 1]).
struct Split {
    const char* name;
    int V;  ///< real vocab; columns [V, Vp) are padding
    std::vector<int> bounds;
    int tp() const { return static_cast<int>(bounds.size()) - 1; }
    int v0(int r) const { return bounds[r]; }
    int nv(int r) const { return bounds[r + 1] - bounds[r]; }
    int owner(int token) const {
        for (int r = 0; r < tp(); r++)
            if (token >= bounds[r] && token < bounds[r + 1]) return r;
        return -1;
    }
};
/// tp 2 and 4 even splits of V 101 (the last piece of tp 4 holds 5 real columns and 27 of padding);
/// V 90 at tp 4, whose last piece [96, 128) is entirely padding; an uneven split whose pieces of 13
/// and 27 columns are not multiples of 8 (the kernels' scalar path, not 16-byte packs).
std::vector<Split> splits() {
    return {{"tp2", 101, {0, 64, 128}},
            {"tp4", 101, {0, 32, 64, 96, 128}},
            {"tp4_padding_piece", 90, {0, 32, 64, 96, 128}},
            {"uneven", 101, {0, 40, 88, 101, 128}}};
}

/// Columns [v0, v0 + nv) of the (N, Vp) row-major x, as a contiguous (N, nv).
std::vector<float> columns(const std::vector<float>& x, int width, int v0, int nv) {
    std::vector<float> out(static_cast<size_t>(N) * nv);
    for (int n = 0; n < N; n++)
        std::copy_n(x.begin() + static_cast<size_t>(n) * width + v0, nv, out.begin() + static_cast<size_t>(n) * nv);
    return out;
}

/// Rows [v0, v0 + nv) of a (Vp, C) table.
std::vector<float> rows(const std::vector<float>& table, int v0, int nv) {
    return {table.begin() + static_cast<size_t>(v0) * C, table.begin() + static_cast<size_t>(v0 + nv) * C};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// What the vocab-parallel cross-entropy gives on every piece of a split.
struct ClassifierTp {
    std::vector<std::vector<float>> stats;   ///< per rank, (N,3)
    std::vector<std::vector<float>> losses;  ///< per rank, (N): the same on every rank
    std::vector<std::vector<float>> grads;   ///< per rank, (N,nv): the gradient written in place
    std::vector<std::vector<float>> losses_no_grad;  ///< per rank, write_grad = false
    std::vector<std::vector<float>> logits_no_grad;  ///< per rank, the logits after write_grad = false
};
/// Runs classifier_partial on each rank's columns of logits (N,Vp), concatenates the stats in rank
/// order (the all-gather), then classifier_finish on each rank, with and without the gradient.
ClassifierTp run_classifier_tp(Ops& o, const Split& sp, const std::vector<float>& logits, const std::vector<int>& tgt,
                               float dloss) {
    const DType dt = o.act_dtype();
    const int tp = sp.tp();
    DevBuf dtgt = upload_ints(o, tgt);
    ClassifierTp res;
    std::vector<float> all;
    for (int r = 0; r < tp; r++) {
        DevBuf piece = upload(o, columns(logits, Vp, sp.v0(r), sp.nv(r)), dt), stats(o, size_t(N) * 3 * 4);
        o.classifier_partial(stats.as<float>(), piece.ptr, dtgt.as<int>(), N, sp.nv(r), sp.v0(r), sp.V);
        res.stats.push_back(download(o, stats.ptr, size_t(N) * 3, DType::f32));
        all.insert(all.end(), res.stats.back().begin(), res.stats.back().end());
    }
    DevBuf dall = upload(o, all, DType::f32);
    for (int r = 0; r < tp; r++) {
        const auto host_piece = columns(logits, Vp, sp.v0(r), sp.nv(r));
        DevBuf piece = upload(o, host_piece, dt), piece2 = upload(o, host_piece, dt);
        DevBuf losses(o, N * 4), losses2(o, N * 4);
        o.classifier_finish(piece.ptr, losses.as<float>(), dall.as<float>(), tp, dtgt.as<int>(), N, sp.nv(r), sp.v0(r),
                            sp.V, dloss, true);
        o.classifier_finish(piece2.ptr, losses2.as<float>(), dall.as<float>(), tp, dtgt.as<int>(), N, sp.nv(r),
                            sp.v0(r), sp.V, dloss, false);
        res.losses.push_back(download(o, losses.ptr, N, DType::f32));
        res.grads.push_back(download(o, piece.ptr, host_piece.size(), dt));
        res.losses_no_grad.push_back(download(o, losses2.ptr, N, DType::f32));
        res.logits_no_grad.push_back(download(o, piece2.ptr, host_piece.size(), dt));
    }
    return res;
}

/// fused_classifier on the whole (N,Vp) logits: losses (N) and the gradient (N,Vp).
std::pair<std::vector<float>, std::vector<float>> run_fused(Ops& o, int V, const std::vector<float>& logits,
                                                            const std::vector<int>& tgt, float dloss) {
    const DType dt = o.act_dtype();
    DevBuf dl = upload(o, logits, dt), dtgt = upload_ints(o, tgt), losses(o, N * 4);
    o.fused_classifier(dl.ptr, losses.as<float>(), dtgt.as<int>(), N, V, Vp, dloss, true);
    return {download(o, losses.ptr, N, DType::f32), download(o, dl.ptr, logits.size(), dt)};
}

/// Targets spread over the real vocab [0, V): rows whose target falls in different pieces.
std::vector<int> targets_for(int V) {
    std::vector<int> tgt(N);
    for (int i = 0; i < N; i++) tgt[i] = (i * 37 + 11) % V;
    return tgt;
}

using TpOpsTest = CudaVsCpu;

/// The two-pass cross-entropy against fused_classifier, on every split, in both precisions.
/// Tolerances (cuda_test_util.hpp's |got - want| <= tol (|want| + rms(want))):
///  - losses, 1e-5 in both precisions: fp32 arithmetic on the same (bf16-exact) logits; M is the
///    row max exactly, S = sum s_r exp(m_r - M) reassociates fused_classifier's sum of exp(x - max)
///    over V <= 101 terms (relative error <= ~V u + a few ulp of expf, u = 2^-24: < 1e-5), which
///    moves the loss (M + log S - t, about 5) by that much absolutely;
///  - the gradient: exp(x - M) / S against fused_classifier's exp(x - lse) differs by S's error
///    and a few roundings, so 1e-5 in fp32; in bf16 both sides round that fp32 value once and may
///    land one bf16 unit (2^-8 relative) apart: 2^-7;
///  - stats against float64 evaluations of their definitions: m and t exactly (a max and a copy);
///    s (at most 64 terms) within 1e-5 relative (the same sum bound with n <= 64).
/// Also exact: padding columns of the gradient are 0, every rank's losses have the same bits, and
/// write_grad = false leaves the logits untouched with losses bitwise those of write_grad = true.
TEST_P(TpOpsTest, ClassifierPiecesMatchFusedClassifier) {
    const float dloss = 1.0f / N;
    for (const Split& sp : splits()) {
        SCOPED_TRACE(sp.name);
        const int tp = sp.tp();
        const auto logits = rnd(static_cast<size_t>(N) * Vp, 60, -4, 4);
        const auto tgt = targets_for(sp.V);
        std::vector<int> rows_per_owner(tp, 0);
        for (int x : tgt) rows_per_owner[sp.owner(x)]++;
        ASSERT_GE(std::count_if(rows_per_owner.begin(), rows_per_owner.end(), [](int k) { return k > 0; }), 2)
            << "targets should fall in several pieces";

        const auto [cuda_losses, cuda_grad] = run_fused(*cuda, sp.V, logits, tgt, dloss);
        const auto [cpu_losses, cpu_grad] = run_fused(*cpu, sp.V, logits, tgt, dloss);
        const ClassifierTp got = run_classifier_tp(*cuda, sp, logits, tgt, dloss);

        // Stats against their definition, in float64.
        for (int r = 0; r < tp; r++) {
            const int valid = std::clamp(sp.V - sp.v0(r), 0, sp.nv(r));
            for (int n = 0; n < N; n++) {
                const float* row = logits.data() + static_cast<size_t>(n) * Vp + sp.v0(r);
                const float* st = got.stats[r].data() + static_cast<size_t>(n) * 3;
                double m = -INFINITY, s = 0;
                for (int j = 0; j < valid; j++) m = std::max(m, double(row[j]));
                for (int j = 0; j < valid; j++) s += std::exp(double(row[j]) - m);
                const int j = tgt[n] - sp.v0(r);
                const float t = j >= 0 && j < sp.nv(r) ? row[j] : 0.0f;
                ASSERT_EQ(st[0], static_cast<float>(m)) << "rank " << r << " row " << n << ": max";
                ASSERT_NEAR(st[1], s, 1e-5 * s) << "rank " << r << " row " << n << ": sum of exp";
                ASSERT_EQ(st[2], t) << "rank " << r << " row " << n << ": target logit";
            }
        }
        // Losses: the same bits on every rank, close to both fused classifiers.
        for (int r = 0; r < tp; r++) {
            EXPECT_TRUE(same_bits(got.losses[r], got.losses[0])) << "rank " << r << "'s losses differ from rank 0's";
            EXPECT_TRUE(same_bits(got.losses_no_grad[r], got.losses[0])) << "rank " << r << ": write_grad = false";
            EXPECT_TRUE(same_bits(got.logits_no_grad[r], columns(logits, Vp, sp.v0(r), sp.nv(r))))
                << "rank " << r << ": logits changed without write_grad";
        }
        expect_close("losses vs cuda fused_classifier", got.losses[0], cuda_losses, kTolF32);
        expect_close("losses vs cpu fused_classifier", got.losses[0], cpu_losses, kTolF32);
        // The gradient pieces side by side.
        std::vector<float> grad(static_cast<size_t>(N) * Vp);
        for (int r = 0; r < tp; r++)
            for (int n = 0; n < N; n++)
                std::copy_n(got.grads[r].begin() + static_cast<size_t>(n) * sp.nv(r), sp.nv(r),
                            grad.begin() + static_cast<size_t>(n) * Vp + sp.v0(r));
        expect_close("dlogits vs cuda fused_classifier", grad, cuda_grad, tol);
        expect_close("dlogits vs cpu fused_classifier", grad, cpu_grad, tol);
        for (int n = 0; n < N; n++)
            for (int v = sp.V; v < Vp; v++) ASSERT_EQ(grad[static_cast<size_t>(n) * Vp + v], 0.0f) << "padding column " << v;
    }
}

/// A piece with no real column: stats (-inf, 0, 0) and an all-zero gradient (V 90, piece [96, 128)).
TEST_P(TpOpsTest, AllPaddingPieceGivesEmptyStats) {
    const Split sp = splits()[2];
    ASSERT_GE(sp.v0(3), sp.V);
    const auto logits = rnd(static_cast<size_t>(N) * Vp, 61, -4, 4);
    const ClassifierTp got = run_classifier_tp(*cuda, sp, logits, targets_for(sp.V), 1.0f / N);
    for (int n = 0; n < N; n++) {
        ASSERT_EQ(got.stats[3][3 * n], -INFINITY) << "row " << n;
        ASSERT_EQ(got.stats[3][3 * n + 1], 0.0f) << "row " << n;
        ASSERT_EQ(got.stats[3][3 * n + 2], 0.0f) << "row " << n;
        ASSERT_TRUE(std::isfinite(got.losses[3][n])) << "row " << n;
    }
    for (float g : got.grads[3]) ASSERT_EQ(g, 0.0f);
}

/// The vocab-parallel embedding: each rank's forward is the whole encoder's output at the positions
/// whose token it holds and exact zeros elsewhere, so the rank-order sum in fp32 rounded to the act
/// dtype (the all-reduce) is encoder_forward's output bitwise; after three micro-batches (ids
/// copied back by the forward; given by encoder_host_tokens; a backward with no forward) every
/// rank's dwte rows are encoder_backward's rows [v0, v0 + nv) bitwise and its dwpe is encoder_backward's
/// dwpe bitwise. Gradients start from random values (the += is checked). One backend per rank, as
/// in a TP run.
TEST_P(TpOpsTest, EncoderPiecesMatchWholeEncoderBitwise) {
    std::vector<int> tok_a(N), tok_b(N), tok_c(N);
    for (int i = 0; i < N; i++) {
        tok_a[i] = ((i * 7 + 3) % 13) * 9;  // 13 tokens in [0, 108], each at several positions
        tok_b[i] = (i * 29 + 5) % Vp;
        tok_c[i] = ((i * 5 + 1) % 17) * 7;
    }
    tok_a[5] = Vp - 1;  // a padding row's id
    const auto wte = rnd(static_cast<size_t>(Vp) * C, 1), wpe = rnd(static_cast<size_t>(T) * C, 2);
    const auto dout_a = rnd(static_cast<size_t>(N) * C, 3), dout_b = rnd(static_cast<size_t>(N) * C, 4),
               dout_c = rnd(static_cast<size_t>(N) * C, 5);
    const auto dwte0 = rnd(wte.size(), 6), dwpe0 = rnd(wpe.size(), 7);
    const size_t NC = static_cast<size_t>(N) * C;
    const size_t es = dtype_size(t);

    // The whole encoder: outputs of micro-batches a and b, dwte and dwpe after all three backwards.
    std::vector<float> out_a, out_b, dwte_full, dwpe_full;
    {
        Ops& o = *cuda;
        DevBuf ia = upload_ints(o, tok_a), ib = upload_ints(o, tok_b), ic = upload_ints(o, tok_c);
        DevBuf dwte_d = upload(o, wte, t), dwpe_d = upload(o, wpe, t), oa(o, NC * es), ob(o, NC * es);
        DevBuf ga = upload(o, dout_a, t), gb = upload(o, dout_b, t), gc = upload(o, dout_c, t);
        DevBuf dwte = upload(o, dwte0, t), dwpe = upload(o, dwpe0, t);
        o.encoder_forward(oa.ptr, ia.as<int>(), dwte_d.ptr, dwpe_d.ptr, B, T, C);
        o.encoder_backward(dwte.ptr, dwpe.ptr, ga.ptr, ia.as<int>(), B, T, C);
        o.encoder_host_tokens(ib.as<int>(), tok_b.data(), N);
        o.encoder_forward(ob.ptr, ib.as<int>(), dwte_d.ptr, dwpe_d.ptr, B, T, C);
        o.encoder_backward(dwte.ptr, dwpe.ptr, gb.ptr, ib.as<int>(), B, T, C);
        o.encoder_backward(dwte.ptr, dwpe.ptr, gc.ptr, ic.as<int>(), B, T, C);
        out_a = download(o, oa.ptr, NC, t);
        out_b = download(o, ob.ptr, NC, t);
        dwte_full = download(o, dwte.ptr, wte.size(), t);
        dwpe_full = download(o, dwpe.ptr, wpe.size(), t);
    }
    for (const Split& sp : splits()) {
        SCOPED_TRACE(sp.name);
        const int tp = sp.tp();
        std::vector<float> fsum_a(NC, 0.0f), fsum_b(NC, 0.0f);
        for (int r = 0; r < tp; r++) {
            auto rank = make_cuda_backend(GetParam().precision);
            Ops& o = *rank;
            const int v0 = sp.v0(r), nv = sp.nv(r);
            DevBuf ia = upload_ints(o, tok_a), ib = upload_ints(o, tok_b), ic = upload_ints(o, tok_c);
            DevBuf wte_r = upload(o, rows(wte, v0, nv), t);
            DevBuf wpe_d = upload(o, wpe, t), oa(o, NC * es), ob(o, NC * es);
            DevBuf ga = upload(o, dout_a, t), gb = upload(o, dout_b, t), gc = upload(o, dout_c, t);
            DevBuf dwte = upload(o, rows(dwte0, v0, nv), t);
            DevBuf dwpe = upload(o, dwpe0, t);
            o.encoder_forward_vocab(oa.ptr, ia.as<int>(), wte_r.ptr, wpe_d.ptr, B, T, C, v0, nv);
            o.encoder_backward_vocab(dwte.ptr, dwpe.ptr, ga.ptr, ia.as<int>(), B, T, C, v0, nv);
            o.encoder_host_tokens(ib.as<int>(), tok_b.data(), N);
            o.encoder_forward_vocab(ob.ptr, ib.as<int>(), wte_r.ptr, wpe_d.ptr, B, T, C, v0, nv);
            o.encoder_backward_vocab(dwte.ptr, dwpe.ptr, gb.ptr, ib.as<int>(), B, T, C, v0, nv);
            o.encoder_backward_vocab(dwte.ptr, dwpe.ptr, gc.ptr, ic.as<int>(), B, T, C, v0, nv);
            const auto ra = download(o, oa.ptr, NC, t), rb = download(o, ob.ptr, NC, t);
            for (int n = 0; n < N; n++)
                for (int c = 0; c < C; c++) {
                    const size_t i = static_cast<size_t>(n) * C + c;
                    // Exact zeros (+0.0) at positions this rank does not own.
                    if (sp.owner(tok_a[n]) != r) {
                        ASSERT_TRUE(!std::signbit(ra[i]) && ra[i] == 0.0f) << "rank " << r << " position " << n;
                    }
                    if (sp.owner(tok_b[n]) != r) {
                        ASSERT_TRUE(!std::signbit(rb[i]) && rb[i] == 0.0f) << "rank " << r << " position " << n;
                    }
                    fsum_a[i] += ra[i];  // fp32, in rank order: the all-reduce's arithmetic
                    fsum_b[i] += rb[i];
                }
            const auto dwte_r = download(o, dwte.ptr, size_t(nv) * C, t);
            EXPECT_TRUE(same_bits(dwte_r, rows(dwte_full, v0, nv)))
                << "rank " << r << ": dwte rows [" << v0 << ", " << v0 + nv << ") differ from encoder_backward's";
            EXPECT_TRUE(same_bits(download(o, dwpe.ptr, wpe.size(), t), dwpe_full))
                << "rank " << r << ": dwpe differs from encoder_backward's";
        }
        if (bf16)
            for (size_t i = 0; i < NC; i++) fsum_a[i] = bf16_round(fsum_a[i]), fsum_b[i] = bf16_round(fsum_b[i]);
        EXPECT_TRUE(same_bits(fsum_a, out_a)) << "sum of the pieces' outputs (ids copied back) != encoder_forward";
        EXPECT_TRUE(same_bits(fsum_b, out_b)) << "sum of the pieces' outputs (host ids) != encoder_forward";
    }
}

INSTANTIATE_TEST_SUITE_P(Cuda, TpOpsTest, testing::ValuesIn(all_modes()), mode_name);

/// Repeated runs give the same bits: the cross-entropy pieces (stats, losses, gradients) and the
/// embedding pieces (outputs, dwte, dwpe) on the uneven split and tp 4, on fresh backends under the
/// emulator's forward, reverse and random (threads and blocks) orders; on a GPU, three runs.
TEST(CudaTpOps, RepeatedRunsAreBitwiseEqual) {
    for (const char* precision : {"fp32", "bf16"}) {
        SCOPED_TRACE(precision);
        const bool bf = std::string(precision) == "bf16";
        const auto logits = random_vec(static_cast<size_t>(N) * Vp, 80, bf, -4, 4);
        const auto wte = random_vec(static_cast<size_t>(Vp) * C, 81, bf), wpe = random_vec(size_t(T) * C, 82, bf);
        const auto dout = random_vec(size_t(N) * C, 83, bf);
        std::vector<int> tok(N);
        for (int i = 0; i < N; i++) tok[i] = (i * 29 + 5) % Vp;
        std::vector<std::vector<float>> first;
        for (const char* order : {"forward", "reverse", "random"}) {
            set_emu_order(order);
            auto o = make_cuda_backend(precision);
            const DType dt = o->act_dtype();
            std::vector<std::vector<float>> run;
            for (const Split& sp : {splits()[1], splits()[3]}) {
                ClassifierTp c = run_classifier_tp(*o, sp, logits, targets_for(sp.V), 1.0f / N);
                for (auto* part : {&c.stats, &c.losses, &c.grads}) run.insert(run.end(), part->begin(), part->end());
                for (int r = 0; r < sp.tp(); r++) {
                    const int v0 = sp.v0(r), nv = sp.nv(r);
                    DevBuf itok = upload_ints(*o, tok), wpe_d = upload(*o, wpe, dt), g = upload(*o, dout, dt);
                    DevBuf wte_r = upload(*o, rows(wte, v0, nv), dt);
                    DevBuf out(*o, size_t(N) * C * dtype_size(dt)), dwpe = upload(*o, wpe, dt);
                    DevBuf dwte = upload(*o, std::vector<float>(size_t(nv) * C, 0.5f), dt);
                    o->encoder_forward_vocab(out.ptr, itok.as<int>(), wte_r.ptr, wpe_d.ptr, B, T, C, v0, nv);
                    o->encoder_backward_vocab(dwte.ptr, dwpe.ptr, g.ptr, itok.as<int>(), B, T, C, v0, nv);
                    run.push_back(download(*o, out.ptr, size_t(N) * C, dt));
                    run.push_back(download(*o, dwte.ptr, size_t(nv) * C, dt));
                    run.push_back(download(*o, dwpe.ptr, wpe.size(), dt));
                }
            }
            if (first.empty()) {
                first = run;
                continue;
            }
            ASSERT_EQ(run.size(), first.size());
            for (size_t k = 0; k < run.size(); k++) EXPECT_TRUE(same_bits(run[k], first[k])) << order << ": result " << k;
        }
        reset_emu_order();
    }
}

/// A slice that is not one (v0 < 0, nv < 1), tp < 1 or V < 1 is refused with an error naming the op.
TEST(CudaTpOps, BadSliceIsRefused) {
    auto o = make_cuda_backend("fp32");
    DevBuf buf(*o, 4096), ids = upload_ints(*o, std::vector<int>(N, 0));
    float* f = buf.as<float>();
    const int* tok = ids.as<int>();
    auto message = [](auto&& call) {
        try {
            call();
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message([&] { o->encoder_forward_vocab(f, tok, f, f, 1, 4, 8, -1, 8); }).find("encoder_forward_vocab"),
              std::string::npos);
    EXPECT_NE(message([&] { o->encoder_backward_vocab(f, f, f, tok, 1, 4, 8, 0, 0); }).find("encoder_backward_vocab"),
              std::string::npos);
    EXPECT_NE(message([&] { o->classifier_partial(f, f, tok, 4, 0, 0, 8); }).find("classifier_partial"), std::string::npos);
    EXPECT_NE(message([&] { o->classifier_partial(f, f, tok, 4, 8, 0, 0); }).find("classifier_partial"), std::string::npos);
    EXPECT_NE(message([&] { o->classifier_finish(f, f, f, 0, tok, 4, 8, 0, 8, 1.0f, true); }).find("classifier_finish"),
              std::string::npos);
}

}  // namespace
}  // namespace llmtrain::cudatest
