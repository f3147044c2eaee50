// tests/model/test_ops_vocab_parallel.cpp — the vocab-parallel ops of tensor parallelism (CPU
// backend), with the group's collectives done by hand in one process: each "rank" r of tp holds
// the vocabulary rows/columns [r·Vp/tp, (r+1)·Vp/tp).
//  - classifier_partial on every rank, the stats concatenated in rank order (the all-gather), then
//    classifier_finish on every rank: the losses are the same bits on every rank, and against
//    fused_classifier (the tp = 1 op) and double loops; the local gradients put side by side against
//    fused_classifier's gradient; padded columns 0; a rank holding padding only (m = -inf, s = 0).
//  - encoder_forward_vocab summed over the ranks in rank order is bitwise encoder_forward;
//    encoder_backward_vocab is bitwise its rows of encoder_backward and the same dwpe.
#include "model/cpu/cpu_ops.hpp"
#include "tests/model/ref_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

constexpr int N = 9;

std::vector<int> targets_for(int V) {
    std::vector<int> t(N);
    for (int n = 0; n < N; ++n) t[n] = (n * 37 + 5) % V;
    t[N - 1] = V - 1;  // the last real column
    t[0] = 0;
    return t;
}

struct Shape {
    int V, Vp, tp;
};

TEST(CpuVocabParallel, CrossEntropyAgainstFusedClassifier) {
    CpuOps ops;
    // Vp 256 over 2 and 4 ranks, 384 over 3; V = 200 leaves rank 2 of 3 (columns 256..383) and
    // rank 3 of 4 (192..255: 8 real) with little or nothing real.
    for (const Shape s : {Shape{101, 128, 1}, Shape{250, 256, 2}, Shape{200, 256, 4}, Shape{200, 384, 3},
                          Shape{300, 384, 4}}) {
        SCOPED_TRACE("V " + std::to_string(s.V) + " Vp " + std::to_string(s.Vp) + " tp " + std::to_string(s.tp));
        const int V = s.V, Vp = s.Vp, tp = s.tp, nv = Vp / tp;
        auto logits = randu(size_t(N) * Vp, 3, -6.0f, 6.0f);
        for (int n = 0; n < N; ++n)
            for (int j = V; j < Vp; ++j) logits[size_t(n) * Vp + j] = 1e4f;  // padding must not count
        const auto targets = targets_for(V);
        const float dloss = 1.0f / 7.0f;
        // tp = 1: fused_classifier on the whole rows.
        auto want_grad = logits;
        std::vector<float> want_loss(N);
        ops.fused_classifier(want_grad.data(), want_loss.data(), targets.data(), N, V, Vp, dloss, true);
        // The ranks' pieces.
        std::vector<std::vector<float>> piece(size_t(tp), std::vector<float>(size_t(N) * nv));
        for (int r = 0; r < tp; ++r)
            for (int n = 0; n < N; ++n)
                std::copy_n(logits.begin() + long(size_t(n) * Vp + size_t(r) * nv), nv,
                            piece[size_t(r)].begin() + long(size_t(n) * nv));
        std::vector<float> all(size_t(tp) * N * 3);
        for (int r = 0; r < tp; ++r) {
            ops.classifier_partial(all.data() + size_t(r) * N * 3, piece[size_t(r)].data(), targets.data(), N, nv,
                                   r * nv, V);
            if (r * nv >= V)
                for (int n = 0; n < N; ++n) {
                    EXPECT_EQ(all[(size_t(r) * N + n) * 3], -INFINITY);
                    EXPECT_EQ(all[(size_t(r) * N + n) * 3 + 1], 0.0f);
                }
        }
        std::vector<float> grad(size_t(N) * Vp), loss0;
        for (int r = 0; r < tp; ++r) {
            std::vector<float> loss(N);
            ops.classifier_finish(piece[size_t(r)].data(), loss.data(), all.data(), tp, targets.data(), N, nv, r * nv, V,
                                  dloss, true);
            if (r == 0) loss0 = loss;
            else EXPECT_EQ(loss, loss0) << "rank " << r << "'s losses differ from rank 0's";
            for (int n = 0; n < N; ++n)
                std::copy_n(piece[size_t(r)].begin() + long(size_t(n) * nv), nv,
                            grad.begin() + long(size_t(n) * Vp + size_t(r) * nv));
        }
        // Losses: the sum of exponentials is split into tp partial sums rescaled by exp(m_r - M),
        // a reassociation of V terms of at most 1 each, so log S moves by a few ulps: 2e-6 relative
        // to fused_classifier, and the double loops' 5e-6 absolute as for fused_classifier.
        expect_close("losses vs fused", loss0, want_loss, 2e-6, 1e-6);
        std::vector<float> clean = logits;  // the double reference reads the real columns only
        expect_close("losses vs double", loss0, ref_cross_entropy(to_double(clean), targets, N, V, Vp), 1e-6, 5e-6);
        // Gradients: exp(x - M)/S, the same exp and M, S within a few ulps: 1e-5 relative + tiny.
        expect_close("dlogits", grad, want_grad, 1e-5, 1e-9);
        for (int n = 0; n < N; ++n)
            for (int j = V; j < Vp; ++j) EXPECT_EQ(grad[size_t(n) * Vp + j], 0.0f) << "padded column " << j;
        // Without write_grad the logits stay.
        std::vector<float> keep(size_t(N) * nv);  // rank 0's logits again (piece[0] holds its gradient)
        for (int n = 0; n < N; ++n)
            std::copy_n(logits.begin() + long(size_t(n) * Vp), nv, keep.begin() + long(size_t(n) * nv));
        std::vector<float> loss(N);
        ops.classifier_finish(keep.data(), loss.data(), all.data(), tp, targets.data(), N, nv, 0, V, dloss, false);
        EXPECT_EQ(loss, loss0);
        for (int n = 0; n < N; ++n)
            for (int j = 0; j < nv; ++j) EXPECT_EQ(keep[size_t(n) * nv + j], logits[size_t(n) * Vp + j]);
    }
}

TEST(CpuVocabParallel, EmbeddingIsBitwiseTheWholeOne) {
    CpuOps ops;
    constexpr int B = 2, T = 7, C = 24, Vp = 128;
    const auto wte = randu(size_t(Vp) * C, 4), wpe = randu(size_t(T) * C, 5), dout = randu(size_t(B) * T * C, 6);
    std::vector<int> inp(B * T);
    for (int i = 0; i < B * T; ++i) inp[i] = (i * 53 + 11) % 100;
    inp[3] = inp[9];  // a repeated token: its rows are summed
    std::vector<float> want(size_t(B) * T * C), want_dwte(size_t(Vp) * C, 0.0f), want_dwpe(size_t(T) * C, 0.0f);
    ops.encoder_forward(want.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    ops.encoder_backward(want_dwte.data(), want_dwpe.data(), dout.data(), inp.data(), B, T, C);
    for (int tp : {1, 2, 4}) {
        SCOPED_TRACE("tp " + std::to_string(tp));
        const int nv = Vp / tp;
        std::vector<float> sum(want.size(), 0.0f);
        for (int r = 0; r < tp; ++r) {
            std::vector<float> out(want.size(), 7.0f), dwte(size_t(nv) * C, 0.0f), dwpe(want_dwpe.size(), 0.0f);
            ops.encoder_forward_vocab(out.data(), inp.data(), wte.data() + size_t(r) * nv * C, wpe.data(), B, T, C,
                                      r * nv, nv);
            for (size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];  // the all-reduce, in rank order
            ops.encoder_backward_vocab(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C, r * nv, nv);
            EXPECT_TRUE(std::equal(dwte.begin(), dwte.end(), want_dwte.begin() + long(size_t(r) * nv * C))) << "dwte rank " << r;
            EXPECT_EQ(dwpe, want_dwpe) << "dwpe rank " << r;
        }
        EXPECT_EQ(sum, want);
    }
}

}  // namespace
}  // namespace llmtrain::test
