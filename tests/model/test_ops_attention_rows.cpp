// tests/model/test_ops_attention_rows.cpp — the CPU's attention over some query rows of a window
// (Ops::attention_forward_rows / attention_backward_rows, context parallelism's op) against the
// whole-window op, which test_ops_attention.cpp and test_ops_documents.cpp check against double
// loops and finite differences: each rank's rows of a load-balanced split (chunks i and 2cp-1-i of
// 2cp) must give that op's outputs for those rows, and the ranks' partial d q|k|v must add up to
// its gradient.
#include <vector>

#include "model/cpu/cpu_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

struct Shape {
    int B, T, NH, NKV, HS;
    size_t W() const { return size_t(NH + 2 * NKV) * HS; }
    size_t C() const { return size_t(NH) * HS; }
};

/// doc_start (B,T): documents of 37, 90 and the rest in row 0, one document in the other rows.
std::vector<int> some_documents(const Shape& s) {
    std::vector<int> ds(size_t(s.B) * s.T, 0);
    for (int t = 0; t < s.T; ++t) ds[size_t(t)] = t < 37 ? 0 : t < 127 ? 37 : 127;
    return ds;
}

/// For each of cp ranks: out and lse of its rows (B,2c,...) from two attention_forward_rows calls,
/// compared with the whole-window op's rows; then its partial dqkv (B,T,W) from the two backward
/// calls, summed over the ranks in rank order and compared with the whole-window backward.
/// `bitwise`: the forward rows must equal the whole op's bits (the chunks start on its 64-row
/// query blocks, so each block's BLAS calls are the same).
void check_split(const Shape& s, int cp, const int* ds, bool bitwise) {
    CpuOps ops;
    const int B = s.B, T = s.T, c = T / (2 * cp), Tl = 2 * c;
    const size_t nq = size_t(B) * T * s.W(), no = size_t(B) * T * s.C();
    const auto qkv = randu(nq, 21, -2.0f, 2.0f), dout = randu(no, 22);
    std::vector<float> out(no), lse(size_t(B) * s.NH * T), want(nq);
    ops.attention_forward_doc(out.data(), lse.data(), qkv.data(), ds, B, T, s.NH, s.NKV, s.HS);
    ops.attention_backward_doc(want.data(), dout.data(), qkv.data(), out.data(), lse.data(), ds, B, T, s.NH, s.NKV,
                               s.HS);
    std::vector<float> sum(nq, 0.0f);
    for (int r = 0; r < cp; ++r) {
        std::vector<float> o(size_t(B) * Tl * s.C()), l(size_t(B) * s.NH * Tl), d(size_t(B) * Tl * s.C());
        std::vector<float> part(nq, 0.0f);
        for (int k = 0; k < 2; ++k) {
            const int chunk = k == 0 ? r : 2 * cp - 1 - r;
            const AttentionRows rows{chunk * c, c, Tl, k * c};
            ops.attention_forward_rows(o.data(), l.data(), qkv.data(), ds, B, T, s.NH, s.NKV, s.HS, rows);
            for (int b = 0; b < B; ++b) {
                for (int i = 0; i < c; ++i)  // dout and out of the rank's rows, as the model keeps them
                    for (size_t e = 0; e < s.C(); ++e) {
                        const size_t w = (size_t(b) * T + size_t(chunk * c + i)) * s.C() + e;
                        const size_t loc = (size_t(b) * Tl + size_t(k * c + i)) * s.C() + e;
                        d[loc] = dout[w];
                        if (bitwise) ASSERT_EQ(o[loc], out[w]) << "rank " << r << " chunk " << chunk;
                        else ASSERT_NEAR(o[loc], out[w], 1e-6 + 1e-6 * std::fabs(out[w])) << "rank " << r;
                    }
                for (int h = 0; h < s.NH; ++h)
                    for (int i = 0; i < c; ++i)
                        ASSERT_NEAR(l[(size_t(b) * s.NH + h) * Tl + size_t(k * c + i)],
                                    lse[(size_t(b) * s.NH + h) * T + size_t(chunk * c + i)], bitwise ? 0.0 : 1e-6);
            }
        }
        for (int k = 0; k < 2; ++k) {
            const int chunk = k == 0 ? r : 2 * cp - 1 - r;
            ops.attention_backward_rows(part.data(), d.data(), qkv.data(), o.data(), l.data(), ds, B, T, s.NH, s.NKV,
                                        s.HS, AttentionRows{chunk * c, c, Tl, k * c});
        }
        for (size_t i = 0; i < nq; ++i) sum[i] += part[i];
    }
    // dQ comes from one rank (its rows); dK and dV are summed over the ranks' queries in another
    // order than the whole op's blocks: fp32 reassociation of O(1) terms over <= 256 keys.
    expect_close("dqkv", sum, want, 1e-5, 1e-5);
}

TEST(CpuAttentionRows, Cp2OnQueryBlocksIsBitwiseTheWholeWindowsRows) {
    const Shape s{2, 256, 4, 2, 8};
    check_split(s, 2, nullptr, true);  // chunks of 64 rows: the whole op's query blocks
}

TEST(CpuAttentionRows, Cp4WithDocumentsMatchesTheWholeWindow) {
    const Shape s{2, 200, 4, 1, 8};
    const std::vector<int> ds = some_documents(s);
    check_split(s, 4, ds.data(), false);  // chunks of 25 rows: blocks cut elsewhere than the whole op's
}

TEST(CpuAttentionRows, MultiHeadCp3Causal) {
    const Shape s{1, 96, 2, 2, 16};
    check_split(s, 3, nullptr, false);
}

}  // namespace
}  // namespace llmtrain::test
