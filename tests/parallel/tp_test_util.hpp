// tests/parallel/tp_test_util.hpp — what the tensor-parallel tests share (test_tensor_parallel.cpp,
// test_sequence_parallel.cpp, test_tp_layer_ranges.cpp): the tiny GPT config, its batches, the
// fixture (CPU backend, allocator, a TP group of the world), and comparisons of a TP rank's
// tensors against their slices of the tp = 1 ones. The tolerance kTol is derived in
// test_tensor_parallel.cpp's header comment (row-parallel sums reassociate; ~1e-6 expected).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "parallel/tp_group.hpp"

namespace llmtrain::tp_test {

constexpr int kB = 2, kT = 16, kN = kB * kT;
constexpr double kTol = 1e-5, kLossTol = 1e-5;
constexpr uint64_t kSeed = 11;

inline GPTConfig config() {
    GPTConfig c;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 64;
    c.seq_len = kT;
    c.vocab_size = 300;  // Vp 384: 192 or 96 rows per rank; at tp 4 rank 3 has 44 real rows
    return c;
}

inline void batch(int i, int* in, int* tgt) {
    std::mt19937 rng(900 + i);
    for (int k = 0; k < kN; ++k) in[k] = int(rng() % 300), tgt[k] = int(rng() % 300);
}

inline std::vector<float> host(Ops& ops, const void* p, size_t n) {
    std::vector<float> h(n);
    ops.memcpy_d2h(h.data(), p, n * 4);
    ops.synchronize();
    return h;
}

/// max |a - b| / max |b| (b the reference); 0 when both are 0.
inline double rel_err(const float* a, const float* b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; ++i) {
        d = std::max(d, double(std::fabs(a[i] - b[i])));
        m = std::max(m, double(std::fabs(b[i])));
    }
    return m == 0 ? d : d / m;
}

/// The largest error seen by a test, printed on rank 0 so the margin below kTol is visible.
struct Worst {
    double err = 0;
    std::string what;
    void see(double e, const std::string& w) {
        if (e > err) err = e, what = w;
    }
    void print(const char* test) const {
        if (world_rank() == 0) std::printf("[%s] largest relative error %.3g (%s), tolerance %.0e\n", test, err, what.c_str(), kTol);
    }
};

/// This rank's tensors of `got` (the tp layout) against their slices of `want` (the tp = 1 layout),
/// over the units [u0, u1]; flat host buffers. Returns nothing; records into w.
inline void expect_slices_near(const ParamLayout& Lt, const std::vector<float>& got, const ParamLayout& L1,
                        const std::vector<float>& want, int u0, int u1, double tol, Worst& w, const std::string& what) {
    for (const ParamTensor& t : Lt.tensors()) {
        if (t.unit < u0 || t.unit > u1) continue;
        std::vector<float> slice(t.numel);
        Lt.cut_local(t, want.data() + L1.find(t.name).offset, slice.data());
        const double e = rel_err(got.data() + t.offset, slice.data(), t.numel);
        w.see(e, what + " " + t.name);
        EXPECT_LE(e, tol) << what << " " << t.name << " (" << tp_split_name(t.split) << ")";
    }
}

/// Every rank's copy of the replicated tensors in the units [u0, u1] is bitwise rank 0's.
inline void expect_replicated_equal(TpGroup& g, const ParamLayout& Lt, const std::vector<float>& buf, int u0, int u1,
                             const std::string& what) {
    for (const ParamTensor& t : Lt.tensors()) {
        if (t.unit < u0 || t.unit > u1 || t.split != TPSplit::replicated) continue;
        std::vector<float> all(t.numel * size_t(g.size()));
        g.all_gather(all.data(), buf.data() + t.offset, t.numel, DType::f32);
        for (int r = 1; r < g.size(); ++r)
            EXPECT_TRUE(std::equal(all.begin(), all.begin() + long(t.numel), all.begin() + long(r * t.numel)))
                << what << " " << t.name << ": rank " << r << " differs from rank 0";
    }
}

struct Fixture {
    std::unique_ptr<Ops> ops = make_backend("cpu", "fp32");
    Allocator alloc{*ops};
    TpGroup group{make_mpi_comm()};
};

}  // namespace llmtrain::tp_test
