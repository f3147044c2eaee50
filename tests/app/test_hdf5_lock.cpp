// tests/app/test_hdf5_lock.cpp — the process-wide HDF5 lock (data/h5.hpp h5::Lock) under load: a
// data loader's I/O thread reads its dataset all the time while another thread writes checkpoints
// (the rank's two files on two threads, then a whole save with its commit) and reads them back, and
// a third writes and reads token datasets (what llmtrain-prep and the sample tokenizer do). Every
// result is compared bit for bit with the same work done serially first. With an HDF5 built
// without thread safety (no H5_HAVE_THREADSAFE in H5pubconf.h) two threads inside the library at
// once corrupt its ID table and metadata cache, which is what the lock prevents; the build
// machine's Debian 1.10.8 is built thread-safe, so there the test checks that the lock keeps every
// result exact and never deadlocks (docs/data.md "One HDF5 lock").
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"
#include "data/h5.hpp"
#include "data/loader.hpp"
#include "data/token_dataset.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;

namespace {

constexpr int kVocab = 70000;  // more than the tokens: token p is p, so a batch shows what it read
constexpr int kB = 8, kT = 64;
constexpr int kBatches = 40;  // one pass of the reference; the concurrent loader goes round it

fs::path scratch(const std::string& name) {
    const fs::path d = fs::path(::testing::TempDir()) / ("hdf5_lock_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

/// A dataset of n tokens with token[p] = p in documents of `doc` tokens.
void write_identity(const std::string& path, uint64_t n, uint64_t doc) {
    TokenDatasetWriter w(path, kVocab, 2, 1, "tok");
    for (uint64_t p = 0; p < n; p += doc) {
        std::vector<int32_t> d;
        for (uint64_t q = p; q < std::min(n, p + doc); ++q) d.push_back(int32_t(q));
        w.add_document(d);
    }
    w.finish();
}

LoaderOptions loader_options(const std::string& path) {
    LoaderOptions o;
    o.path = path;
    o.B = kB;
    o.T = kT;
    o.shuffle = true;
    o.seed = 7;
    o.vocab_size = kVocab;
    return o;
}

std::vector<float> random_flat(const ParamLayout& L, uint64_t seed) {
    std::vector<float> x(L.total_numel(), 0.0f);
    std::mt19937_64 g(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    for (const auto& t : L.tensors())
        for (size_t i = 0; i < t.numel; ++i) x[t.offset + i] = n(g);
    return x;
}

TrainState state_of(int64_t step, const GPTConfig& model) {
    TrainState st;
    st.run_id = "lock-test";
    st.step = step;
    st.loader = {0, 1, {}};
    st.sampler_rng = "0";
    st.model_config_hash = "0";
    st.model = model;
    st.backend = "cpu";
    st.precision = "fp32";
    return st;
}

bool same(const std::vector<float>& a, const std::vector<float>& b, const ParamLayout& L) {
    for (const auto& t : L.tensors())
        if (std::memcmp(a.data() + t.offset, b.data() + t.offset, 4 * t.numel) != 0) return false;
    return true;
}

}  // namespace

TEST(Hdf5Lock, LoaderCheckpointsAndDatasetsAtOnceMatchTheSerialResults) {
    const fs::path dir = scratch("stress");
    const std::string data = (dir / "train.h5").string();
    write_identity(data, 60000, 997);

    // Serial references: the loader's first kBatches batches, alone.
    std::vector<std::vector<int32_t>> ref(kBatches, std::vector<int32_t>(2 * kB * kT));
    {
        DataLoader dl(loader_options(data));
        for (auto& b : ref) dl.next(b.data(), b.data() + kB * kT);
    }
    GPTConfig model;
    model.n_layer = 3;
    model.n_head = 2;
    model.n_embd = 64;
    model.seq_len = 16;
    model.vocab_size = 300;
    const ParamLayout L(model);
    const auto p = random_flat(L, 1), m = random_flat(L, 2), v = random_flat(L, 3);
    const size_t half = L.tensors()[L.tensors().size() / 2].offset;  // two shards: two optim files
    const std::vector<OptimShardView> views{{0, L.total_numel(), m.data(), v.data(), p.data()}};
    const std::vector<OptimShardView> shards{{0, half, m.data(), v.data()},
                                             {half, L.total_numel(), m.data() + half, v.data() + half}};

    std::atomic<bool> done{false};
    std::atomic<int> loader_rounds{0}, loader_bad{0}, ckpt_bad{0}, data_bad{0};
    // The loader: its I/O thread reads ahead while next() hands out batches, round after round.
    std::thread loader([&] {
        DataLoader dl(loader_options(data));
        const LoaderState start = dl.state();
        std::vector<int32_t> b(2 * kB * kT);
        while (!done) {
            for (int i = 0; i < kBatches; ++i) {
                dl.next(b.data(), b.data() + kB * kT);
                if (b != ref[size_t(i)]) ++loader_bad;
            }
            dl.restore(start);
            ++loader_rounds;
        }
    });
    // Token datasets written and read back (llmtrain-prep, the sample tokenizer's file).
    std::thread datasets([&] {
        for (int it = 0; !done; ++it) {
            const std::string path = (dir / ("d" + std::to_string(it % 3) + ".h5")).string();
            write_identity(path, 5000 + uint64_t(it % 7) * 311, 50 + uint64_t(it % 5));
            TokenDataset ds(path);
            std::vector<int32_t> w(3 * 32);
            ds.read_windows({17, 4000, 901}, 32, w.data(), kVocab);
            for (int k = 0; k < 3; ++k)
                for (int j = 0; j < 32; ++j)
                    if (w[size_t(k * 32 + j)] != int32_t((k == 0 ? 17 : k == 1 ? 4000 : 901) + j)) ++data_bad;
            if (ds.tokenizer_bytes() != "tok" || ds.doc_offsets().back() != ds.info().n_tokens) ++data_bad;
        }
    });
    // Checkpoints: a rank's two files on two threads, then a whole save (parts, commit) read back.
    const int kSaves = 12;
    for (int it = 0; it < kSaves; ++it) {
        const fs::path part = dir / ("part_" + std::to_string(it));
        fs::create_directories(part);
        const std::vector<PartInfo> files = write_rank_files(part.string(), 0, L, views, true);
        std::vector<float> p2(L.total_numel()), m2(L.total_numel()), v2(L.total_numel());
        read_params(part.string(), L, p2.data());
        if (files.size() != 2 || describe_part(part.string(), "model.h5").sha256 != files[1].sha256 || !same(p, p2, L))
            ++ckpt_bad;
        fs::remove_all(part);
        const std::string d = save_checkpoint((dir / "run").string(), state_of(it + 1, model), L, p.data(), shards, 2);
        std::fill(p2.begin(), p2.end(), 0.0f);
        read_params(d, L, p2.data());
        read_optim(d, L, 0, L.total_numel(), m2.data(), v2.data());
        if (!same(p, p2, L) || !same(m, m2, L) || !same(v, v2, L) || !checkpoint_problem(d).empty()) ++ckpt_bad;
    }
    while (loader_rounds < 2) std::this_thread::yield();  // the loader overlapped the saves at least once
    done = true;
    loader.join();
    datasets.join();
    EXPECT_EQ(loader_bad.load(), 0) << "batches differing from the serial reading";
    EXPECT_EQ(ckpt_bad.load(), 0) << "checkpoints not read back bit for bit";
    EXPECT_EQ(data_bad.load(), 0) << "token datasets not read back as written";
    std::printf("%d checkpoint rounds beside %d loader rounds of %d batches\n", kSaves, loader_rounds.load(), kBatches);
}

// The lock nests on one thread (a locked function calling another that locks), and last_error()
// still reports a failed call's reason after the Lock that made it is released (io_rows' pattern).
TEST(Hdf5Lock, NestsAndKeepsTheErrorPastItsRelease) {
    {
        h5::Lock outer;
        h5::Lock inner;  // recursive: this thread takes it again
        std::thread other([] { EXPECT_FALSE(h5::mutex().try_lock()); });  // held for every other thread
        other.join();
    }
    {
        h5::Lock lock;
        EXPECT_LT(H5Fopen("/nonexistent/x.h5", H5F_ACC_RDONLY, H5P_DEFAULT), 0);
    }
    const std::string why = h5::last_error();
    EXPECT_NE(why, "unknown HDF5 error");
    EXPECT_NE(why.find("unable to open file"), std::string::npos) << why;
    std::thread other([] {  // another thread's kept error is its own
        EXPECT_EQ(h5::last_error(), "unknown HDF5 error");
    });
    other.join();
}
