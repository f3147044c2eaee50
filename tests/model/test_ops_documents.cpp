// tests/model/test_ops_documents.cpp — document masking on the CPU backend (ops.hpp "document
// masking"): block-causal grouped-query attention against a double-precision loop written here
// from the definition (query t sees keys j with doc_start[t] <= j <= t), its backward against
// central finite differences of that loop, rotary and learned positions restarting per document,
// the host's boundaries (model/documents.hpp) and the FlashAttention-style block counts.
#include <cmath>

#include "model/cpu/cpu_ops.hpp"
#include "model/documents.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

using Vec = std::vector<double>;

/// out (B,T,NH*HS) and lse (B,NH,T) of block-causal GQA from qkv (B,T,(NH+2NKV)*HS): softmax over
/// the keys ds[b,i] <= j <= i of q_i.k_j / sqrt(HS), query head h reading key/value head h/(NH/NKV).
Vec ref_doc_attention(const Vec& qkv, const std::vector<int>& ds, int B, int T, int NH, int NKV, int HS,
                      Vec* lse = nullptr) {
    const int W = (NH + 2 * NKV) * HS, C = NH * HS;
    Vec out(size_t(B) * T * C, 0.0);
    if (lse) lse->assign(size_t(B) * NH * T, 0.0);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const int g = h / (NH / NKV);
            auto at = [&](int t, int col) { return qkv[(size_t(b) * T + t) * W + size_t(col)]; };
            for (int i = 0; i < T; ++i) {
                const int lo = ds[size_t(b) * T + i];
                Vec s;
                double mx = -INFINITY, sum = 0;
                for (int j = lo; j <= i; ++j) {
                    double d = 0;
                    for (int e = 0; e < HS; ++e) d += at(i, h * HS + e) * at(j, C + g * HS + e);
                    s.push_back(d / std::sqrt(double(HS)));
                    mx = std::max(mx, s.back());
                }
                for (double& x : s) sum += (x = std::exp(x - mx));
                if (lse) (*lse)[(size_t(b) * NH + h) * T + i] = mx + std::log(sum);
                for (int e = 0; e < HS; ++e) {
                    double o = 0;
                    for (int j = lo; j <= i; ++j) o += s[size_t(j - lo)] / sum * at(j, C + (NKV + g) * HS + e);
                    out[(size_t(b) * T + i) * C + size_t(h) * HS + e] = o;
                }
            }
        }
    return out;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

/// doc_start (B,T) of rows cut into documents of the given lengths (repeated to fill T).
std::vector<int> starts_of(int B, int T, const std::vector<std::vector<int>>& lens) {
    std::vector<int> ds(size_t(B) * T);
    for (int b = 0; b < B; ++b) {
        int t = 0, k = 0;
        while (t < T) {
            const int n = lens[size_t(b)][size_t(k++) % lens[size_t(b)].size()];
            for (int i = t; i < std::min(T, t + n); ++i) ds[size_t(b) * T + i] = t;
            t += n;
        }
    }
    return ds;
}

TEST(CpuDocuments, StartsAndPositionsFromEos) {
    const int eos = 9, B = 2, T = 7;
    const std::vector<int> tok = {1, 9, 2, 3, 9, 9, 4,  /* row 1 */ 5, 6, 7, 8, 1, 2, 9};
    std::vector<int> ds(tok.size()), pos(tok.size());
    document_starts(tok.data(), eos, B, T, ds.data(), pos.data());
    EXPECT_EQ(ds, (std::vector<int>{0, 0, 2, 2, 2, 5, 6, 0, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(pos, (std::vector<int>{0, 1, 0, 1, 2, 0, 0, 0, 1, 2, 3, 4, 5, 6}));
    document_starts(tok.data(), -1, B, T, ds.data(), nullptr);  // no eos: one document per row
    for (int i = 0; i < B * T; ++i) EXPECT_EQ(ds[size_t(i)], 0);
}

TEST(CpuDocuments, BlockCountsSkipWholeBlocksBeforeTheDocument) {
    // One row of T = 256, key and query blocks of 64: documents start at 0, 100 and 200.
    std::vector<int> ds(256);
    for (int t = 0; t < 256; ++t) ds[size_t(t)] = t < 100 ? 0 : t < 200 ? 100 : 200;
    const BlockCounts n = document_block_counts(ds.data(), 1, 256, 64, 64);
    EXPECT_EQ(n.causal, 1u + 2 + 3 + 4);
    // Query block 128 starts in the document at 100 (key block 1 on), block 192 at 100 too.
    EXPECT_EQ(n.visited, 1u + 2 + (3 - 1) + (4 - 1));
}

TEST(CpuDocuments, AttentionForwardMatchesDoubleLoop) {
    CpuOps ops;
    const int B = 2, T = 150, NH = 4, NKV = 2, HS = 8, W = (NH + 2 * NKV) * HS;
    const std::vector<int> ds = starts_of(B, T, {{17, 70, 1, 40}, {150}});  // row 1: one document
    auto qkv = randu(size_t(B) * T * W, 11, -2.0f, 2.0f);
    std::vector<float> out(size_t(B) * T * NH * HS), lse(size_t(B) * NH * T);
    ops.attention_forward_doc(out.data(), lse.data(), qkv.data(), ds.data(), B, T, NH, NKV, HS);
    Vec want_lse;
    const Vec want = ref_doc_attention(to_double(qkv), ds, B, T, NH, NKV, HS, &want_lse);
    // fp32 softmax over <= 150 keys of values in [-2, 2] (as test_ops_attention.cpp).
    expect_close("out", out, want, 1e-5, 1e-5);
    expect_close("lse", lse, want_lse, 1e-6, 1e-5);
    // Row 1 is one document: bitwise the causal op.
    std::vector<float> o2(out.size()), l2(lse.size());
    ops.attention_forward_gqa(o2.data(), l2.data(), qkv.data(), B, T, NH, NKV, HS);
    const size_t half = out.size() / 2;
    for (size_t i = half; i < out.size(); ++i) ASSERT_EQ(out[i], o2[i]) << i;
}

TEST(CpuDocuments, AttentionBackwardMatchesFiniteDifferences) {
    CpuOps ops;
    const int B = 1, T = 70, NH = 2, NKV = 1, HS = 4, W = (NH + 2 * NKV) * HS;
    const std::vector<int> ds = starts_of(B, T, {{5, 60, 1, 4}});  // a boundary inside the second query block
    const size_t n_qkv = size_t(B) * T * W, n_out = size_t(B) * T * NH * HS;
    auto qkv = randu(n_qkv, 12, -2.0f, 2.0f), R = randu(n_out, 13);
    std::vector<float> out(n_out), lse(size_t(B) * NH * T), dqkv(n_qkv, 7.0f);
    ops.attention_forward_doc(out.data(), lse.data(), qkv.data(), ds.data(), B, T, NH, NKV, HS);
    ops.attention_backward_doc(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), ds.data(), B, T, NH, NKV,
                               HS);
    const Vec Rd = to_double(R);
    const Vec g = finite_diff([&](const Vec& v) { return dot(Rd, ref_doc_attention(v, ds, B, T, NH, NKV, HS)); },
                              to_double(qkv), 1e-5);
    // O(1) gradients; fp32 recomputed probabilities over <= 60 keys (as test_ops_llama.cpp's GQA).
    expect_close("dqkv", dqkv, g, 1e-4, 2e-5);
}

TEST(CpuDocuments, RopeAtPositionsIsRopeOfEachDocument) {
    CpuOps ops;
    const int B = 2, T = 9, NH = 2, NKV = 1, HS = 8, W = (NH + 2 * NKV) * HS;
    const std::vector<int> ds = starts_of(B, T, {{4, 5}, {9}});
    std::vector<int> pos(ds.size());
    for (int i = 0; i < B * T; ++i) pos[size_t(i)] = i % T - ds[size_t(i)];
    const auto x = randu(size_t(B) * T * W, 14);
    std::vector<float> y = x, plain = x;
    ops.rope_forward_pos(y.data(), pos.data(), B, T, NH, NKV, HS, 10000.0f, T);
    ops.rope_forward(plain.data(), B, T, NH, NKV, HS, 10000.0f);
    // Row 0's second document (positions 4..8) rotated as a sequence of its own: rows 0..4 of plain
    // hold positions 0..4 of the same op; rotate that document's rows alone and compare bitwise.
    std::vector<float> doc(x.begin() + 4 * W, x.begin() + 9 * W);
    ops.rope_forward(doc.data(), 1, 5, NH, NKV, HS, 10000.0f);
    for (size_t i = 0; i < doc.size(); ++i) ASSERT_EQ(y[4 * W + i], doc[i]) << i;
    for (size_t i = size_t(T) * W; i < y.size(); ++i) ASSERT_EQ(y[i], plain[i]) << i;  // row 1: one document
    ops.rope_backward_pos(y.data(), pos.data(), B, T, NH, NKV, HS, 10000.0f, T);  // the inverse rotation
    expect_close("rope round trip", y, to_double(x), 0, 1e-6);
}

TEST(CpuDocuments, LearnedPositionsRestartPerDocument) {
    CpuOps ops;
    const int B = 2, T = 5, C = 3, Vp = 6;
    const std::vector<int> inp = {1, 2, 3, 4, 5, 0, 1, 2, 3, 4};
    const std::vector<int> pos = {0, 1, 0, 1, 2, 0, 1, 2, 3, 4};
    const auto wte = randu(size_t(Vp) * C, 15), wpe = randu(size_t(T) * C, 16), dout = randu(size_t(B) * T * C, 17);
    std::vector<float> out(size_t(B) * T * C);
    ops.encoder_forward_pos(out.data(), inp.data(), pos.data(), wte.data(), wpe.data(), B, T, C, 0, Vp);
    for (int i = 0; i < B * T; ++i)
        for (int c = 0; c < C; ++c)
            ASSERT_EQ(out[size_t(i) * C + c], wte[size_t(inp[size_t(i)]) * C + c] + wpe[size_t(pos[size_t(i)]) * C + c]);
    std::vector<float> dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
    ops.encoder_backward_pos(dwte.data(), dwpe.data(), dout.data(), inp.data(), pos.data(), B, T, C, 0, Vp);
    Vec want_wpe(wpe.size(), 0.0), want_wte(wte.size(), 0.0);
    for (int i = 0; i < B * T; ++i)
        for (int c = 0; c < C; ++c) {
            want_wpe[size_t(pos[size_t(i)]) * C + c] += dout[size_t(i) * C + c];
            want_wte[size_t(inp[size_t(i)]) * C + c] += dout[size_t(i) * C + c];
        }
    expect_close("dwpe", dwpe, want_wpe, 0, 1e-6);
    expect_close("dwte", dwte, want_wte, 0, 1e-6);
}

}  // namespace
}  // namespace llmtrain::test
