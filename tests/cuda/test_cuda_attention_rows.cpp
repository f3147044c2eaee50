// tests/cuda/test_cuda_attention_rows.cpp — context parallelism's attention over some query rows of
// a window (Ops::attention_forward_rows / attention_backward_rows; the CUDA backend runs them on the
// cuBLAS path whatever model.attention says) under cuda_emu against the CPU backend's (checked
// against its whole-window op in tests/model/test_ops_attention_rows.cpp): every rank of a
// load-balanced split (chunks i and 2cp-1-i of 2cp), its out and lse at its rows, and its partial
// d q|k|v added over both chunks into a buffer that already holds values (the "added to" contract).
// Multi-head and grouped-query, causal and document-masked, a tile smaller than a chunk
// (model.attention_workspace_mb 1 at T 512: tiles of 64 rows over chunks of 128).
// Tolerances (cuda_test_util.hpp's relative form): fp32 1e-5; bf16 out 2^-6 and dqkv 2^-5, lse
// 2^-7: test_cuda_documents.cpp's for the cublas path (P and dS read in bf16 by its GEMMs: 2x one
// op's 2^-7), dqkv doubled once more for the two calls' bf16 sums into the same buffer.
#include <array>

#include "model/cuda/cuda_backend.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

using RowsTest = CudaVsCpu;

/// Rank r's out (B,2c,NH*HS), lse (B,NH,2c) and dqkv (B,T,W) (starting from `start`) on `o`.
std::array<std::vector<float>, 3> run_rank(Ops& o, const std::vector<float>& qkv, const std::vector<float>& dout,
                                           const std::vector<float>& start, const std::vector<int>& ds, int B, int T,
                                           int NH, int NKV, int HS, int cp, int r) {
    const DType dt = o.act_dtype();
    const int c = T / (2 * cp), Tl = 2 * c;
    const size_t es = dtype_size(dt), n_out = size_t(B) * Tl * NH * HS, n_lse = size_t(B) * NH * Tl;
    DevBuf dq = upload(o, qkv, dt), dgo = upload(o, dout, dt), dd = ds.empty() ? DevBuf() : upload_ints(o, ds);
    DevBuf dqkv = upload(o, start, dt), out(o, n_out * es), lse(o, n_lse * 4);
    o.memset(out.ptr, 0xff, n_out * es);
    const int* doc = ds.empty() ? nullptr : dd.as<int>();
    for (int k = 0; k < 2; ++k) {
        const int chunk = k == 0 ? r : 2 * cp - 1 - r;
        o.attention_forward_rows(out.ptr, lse.as<float>(), dq.ptr, doc, B, T, NH, NKV, HS,
                                 AttentionRows{chunk * c, c, Tl, k * c});
    }
    for (int k = 0; k < 2; ++k) {
        const int chunk = k == 0 ? r : 2 * cp - 1 - r;
        o.attention_backward_rows(dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>(), doc, B, T, NH, NKV, HS,
                                  AttentionRows{chunk * c, c, Tl, k * c});
    }
    return {download(o, out.ptr, n_out, dt), download(o, lse.ptr, n_lse, DType::f32),
            download(o, dqkv.ptr, qkv.size(), dt)};
}

void check(RowsTest& f, Ops& dev, Ops& cpu, int B, int T, int NH, int NKV, int HS, int cp, bool docs) {
    const size_t W = size_t(NH + 2 * NKV) * HS, Tl = size_t(T / cp);
    std::vector<int> ds;
    if (docs)  // row 0: documents of 37, 90 and the rest; the other rows one document
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) ds.push_back(b > 0 ? 0 : t < 37 ? 0 : t < 127 ? 37 : 127);
    const auto qkv = random_vec(size_t(B) * T * W, 300 + NKV, f.GetParam().precision == "bf16", -2, 2);
    const auto start = random_vec(size_t(B) * T * W, 310, f.GetParam().precision == "bf16");
    for (int r = 0; r < cp; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r) + " of cp " + std::to_string(cp));
        const auto dout = random_vec(size_t(B) * Tl * NH * HS, 320 + r, f.GetParam().precision == "bf16");
        const auto got = run_rank(dev, qkv, dout, start, ds, B, T, NH, NKV, HS, cp, r);
        const auto want = run_rank(cpu, qkv, dout, start, ds, B, T, NH, NKV, HS, cp, r);
        const bool bf = dev.act_dtype() == DType::bf16;
        expect_close("rows out", got[0], want[0], bf ? 2 * kTolBf16 : kTolF32);
        expect_close("rows lse", got[1], want[1], bf ? kTolBf16 : kTolF32);
        expect_close("rows dqkv", got[2], want[2], bf ? 4 * kTolBf16 : kTolF32);
    }
}

TEST_P(RowsTest, MultiHeadCausalCp2) { check(*this, *cuda, *cpu, 2, 64, 4, 4, 8, 2, false); }

TEST_P(RowsTest, GroupedQueryWithDocumentsCp4) { check(*this, *cuda, *cpu, 2, 160, 4, 2, 8, 4, true); }

TEST_P(RowsTest, TilesSmallerThanAChunk) {
    CudaBackendOptions opt;
    opt.attention_workspace_mb = 1;  // B*NH*T*(4 + es) bytes per query row: 64-row tiles at T 512
    auto dev = make_cuda_backend(GetParam().precision, opt);
    check(*this, *dev, *cpu, 1, 512, 4, 2, 8, 2, true);
}

INSTANTIATE_TEST_SUITE_P(Cuda, RowsTest, testing::ValuesIn(all_modes()), mode_name);

}  // namespace
}  // namespace llmtrain::cudatest
