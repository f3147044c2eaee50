// tests/app/test_checkpoint.cpp — the checkpoint format and write protocol (app/checkpoint.hpp).
//
// References: the values written (seeded random tensors) must come back bit for bit, by tensor
// name, also into a layout with other padding and into other optimizer shard ranges; completion is
// judged by state.toml alone; keep_last prunes exactly the oldest complete checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <random>
#include <sstream>

#include "app/checkpoint.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;

namespace {

GPTConfig tiny() {
    GPTConfig c;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 16;
    c.seq_len = 8;
    c.vocab_size = 50;
    return c;
}

/// A flat buffer whose real elements are random and whose padding is NaN (must never be read back).
std::vector<float> random_flat(const ParamLayout& L, uint64_t seed) {
    std::vector<float> x(L.total_numel(), std::nanf(""));
    std::mt19937_64 g(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    for (const auto& t : L.tensors())
        for (size_t i = 0; i < t.numel; ++i) x[t.offset + i] = n(g);
    return x;
}

TrainState some_state(int64_t step) {
    TrainState st;
    st.step = step;
    st.tokens_seen = 123456789012ull;
    st.loader = {3, 17};
    std::mt19937_64 rng(99);
    rng.discard(5);
    std::ostringstream os;
    os << rng;
    st.sampler_rng = os.str();
    st.adam_t = int(step);
    st.model_config_hash = "abc123";
    st.model = tiny();
    st.dp = 2;
    st.world_size = 2;
    st.backend = "cpu";
    st.precision = "fp32";
    return st;
}

struct Ckpt : ::testing::Test {
    fs::path dir;
    void SetUp() override {
        dir = fs::path(::testing::TempDir()) / ("ckpt_" + std::string(::testing::UnitTest::GetInstance()
                                                                         ->current_test_info()->name()));
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    std::string save(const ParamLayout& L, int64_t step, int keep_last, const std::vector<float>& p,
                     const std::vector<float>& m, const std::vector<float>& v) {
        return save_checkpoint(dir.string(), some_state(step), L, p.data(),
                               {OptimShardView{0, L.total_numel(), m.data(), v.data()}}, keep_last);
    }
};

}  // namespace

TEST_F(Ckpt, RoundTripIsBitwiseAndStateComplete) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = random_flat(L, 2), v = random_flat(L, 3);
    const std::string d = save(L, 7, 0, p, m, v);
    EXPECT_EQ(d, (dir / "checkpoints" / "step_7").string());
    EXPECT_EQ(find_latest_checkpoint(dir.string()), d);

    std::vector<float> p2(L.total_numel()), m2(L.total_numel()), v2(L.total_numel());
    read_params(d, L, p2.data());
    read_optim(d, L, 0, L.total_numel(), m2.data(), v2.data());
    for (const auto& t : L.tensors())
        for (size_t i = 0; i < t.numel; ++i) {
            const size_t k = t.offset + i;
            ASSERT_EQ(std::memcmp(&p[k], &p2[k], 4), 0) << t.name << "[" << i << "]";
            ASSERT_EQ(std::memcmp(&m[k], &m2[k], 4), 0) << t.name;
            ASSERT_EQ(std::memcmp(&v[k], &v2[k], 4), 0) << t.name;
        }
    TrainState a = some_state(7), b = read_train_state(d);
    EXPECT_EQ(b.step, a.step);
    EXPECT_EQ(b.tokens_seen, a.tokens_seen);
    EXPECT_EQ(b.loader.epoch, 3u);
    EXPECT_EQ(b.loader.batch, 17u);
    EXPECT_EQ(b.sampler_rng, a.sampler_rng);
    EXPECT_EQ(b.adam_t, 7);
    EXPECT_EQ(b.model_config_hash, "abc123");
    EXPECT_EQ(b.model.n_embd, 16);
    EXPECT_EQ(b.model.vocab_size, 50);
    EXPECT_EQ(b.dp, 2);
    EXPECT_EQ(b.backend, "cpu");
    std::ifstream latest(dir / "checkpoints" / "latest");
    std::string line;
    std::getline(latest, line);
    EXPECT_EQ(line, "step_7");
    EXPECT_FALSE(fs::exists(dir / "checkpoints" / ".tmp_step_7"));
}

TEST_F(Ckpt, LoadsIntoOtherPaddingAndOtherShardRanges) {
    ParamLayout L(tiny()), L2(tiny(), 96);  // L2: every unit padded to a multiple of 96 elements
    ASSERT_NE(L.total_numel(), L2.total_numel());
    auto p = random_flat(L, 4), m = random_flat(L, 5), v = random_flat(L, 6);
    // Written as two shards that split the buffer inside a tensor.
    const size_t cut = L.tensors()[3].offset + 5;
    TrainState st = some_state(3);
    const std::string d =
        save_checkpoint(dir.string(), st, L, p.data(),
                        {OptimShardView{0, cut, m.data(), v.data()},
                         OptimShardView{cut, L.total_numel(), m.data() + cut, v.data() + cut}},
                        0);
    std::vector<float> p2(L2.total_numel());
    read_params(d, L2, p2.data());
    // Read back as the second half of L2's buffer, the way a ZeRO rank would.
    const size_t b = L2.total_numel() / 2, e = L2.total_numel();
    std::vector<float> m2(e - b), v2(e - b);
    read_optim(d, L2, b, e, m2.data(), v2.data());
    for (const auto& t2 : L2.tensors()) {
        const auto& t = L.find(t2.name);
        for (size_t i = 0; i < t.numel; ++i) {
            ASSERT_EQ(p2[t2.offset + i], p[t.offset + i]) << t.name;
            const size_t k = t2.offset + i;
            if (k >= b && k < e) {
                ASSERT_EQ(m2[k - b], m[t.offset + i]) << t.name;
                ASSERT_EQ(v2[k - b], v[t.offset + i]) << t.name;
            }
        }
    }
    // Padding comes back as zeros.
    for (size_t k = 0; k < L2.total_numel(); ++k) {
        bool real = false;
        for (const auto& t : L2.tensors()) real |= (k >= t.offset && k < t.offset + t.numel);
        if (!real) {
            ASSERT_EQ(p2[k], 0.0f) << k;
        }
    }
}

TEST_F(Ckpt, ShapeMismatchNamesBothShapes) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string d = save(L, 1, 0, p, m, v);
    GPTConfig wide = tiny();
    wide.n_embd = 32;
    ParamLayout W(wide);
    std::vector<float> out(W.total_numel());
    try {
        read_params(d, W, out.data());
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("model.h5"), std::string::npos) << msg;
        // The first tensor (wte) differs: both shapes are named.
        const auto& a = L.tensors()[0].shape;
        const auto& b = W.tensors()[0].shape;
        auto str = [](const std::vector<int64_t>& s) {
            return "[" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + "]";
        };
        EXPECT_NE(msg.find(L.tensors()[0].name + " has shape " + str(a)), std::string::npos) << msg;
        EXPECT_NE(msg.find("but " + str(b)), std::string::npos) << msg;
    }
}

TEST_F(Ckpt, IncompleteDirectoriesAreIgnored) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string good = save(L, 4, 0, p, m, v);
    const fs::path ck = dir / "checkpoints";
    // A crashed write of step 6 and a step_8 without its state file (written last).
    fs::copy(good, ck / ".tmp_step_6", fs::copy_options::recursive);
    fs::copy(good, ck / "step_8", fs::copy_options::recursive);
    fs::remove(ck / "step_8" / "state.toml");
    fs::create_directories(ck / "step_x9");
    EXPECT_EQ(find_latest_checkpoint(dir.string()), good);
    EXPECT_EQ(resolve_resume("auto", dir.string()), good);
    EXPECT_EQ(resolve_resume("none", dir.string()), "");
    EXPECT_THROW(resolve_resume((ck / "step_8").string(), dir.string()), CheckpointError);
    EXPECT_THROW(resolve_resume((ck / "nope").string(), dir.string()), CheckpointError);
    EXPECT_EQ(resolve_resume(good, dir.string()), good);
    EXPECT_EQ(find_latest_checkpoint((dir / "no_such_run").string()), "");
}

TEST_F(Ckpt, KeepLastPrunesOnlyOlderCompleteOnes) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const fs::path ck = dir / "checkpoints";
    for (int s : {2, 4, 6}) save(L, s, 0, p, m, v);
    fs::create_directories(ck / "step_1");  // incomplete: not counted, not touched
    save(L, 8, 2, p, m, v);
    EXPECT_FALSE(fs::exists(ck / "step_2"));
    EXPECT_FALSE(fs::exists(ck / "step_4"));
    EXPECT_TRUE(fs::exists(ck / "step_6" / "state.toml"));
    EXPECT_TRUE(fs::exists(ck / "step_8" / "state.toml"));
    EXPECT_TRUE(fs::exists(ck / "step_1"));
}

TEST_F(Ckpt, SavingAnExistingStepReplacesIt) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), p2 = random_flat(L, 9), m = p, v = p;
    save(L, 5, 0, p, m, v);
    const std::string d = save(L, 5, 0, p2, m, v);
    std::vector<float> back(L.total_numel());
    read_params(d, L, back.data());
    EXPECT_EQ(back[L.tensors()[0].offset], p2[L.tensors()[0].offset]);
    for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
        EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos) << e.path();
}

TEST_F(Ckpt, UnwritableRunDirIsAClearError) {
    std::ofstream(dir / "file") << "x";
    ParamLayout L(tiny());
    auto p = random_flat(L, 1);
    try {
        save_checkpoint((dir / "file" / "run").string(), some_state(1), L, p.data(),
                        {OptimShardView{0, L.total_numel(), p.data(), p.data()}}, 0);
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("file/run/checkpoints"), std::string::npos) << e.what();
    }
}

TEST_F(Ckpt, BadStateFileNamesTheKey) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string d = save(L, 3, 0, p, m, v);
    std::string text;
    {
        std::ifstream f(d + "/state.toml");
        text.assign(std::istreambuf_iterator<char>(f), {});
    }
    const auto at = text.find("tokens_seen = ");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 14, "tokens_seen = \"many\" #");
    std::ofstream(d + "/state.toml") << text;
    try {
        read_train_state(d);
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("tokens_seen"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("state.toml"), std::string::npos) << e.what();
    }
}
