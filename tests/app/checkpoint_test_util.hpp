// tests/app/checkpoint_test_util.hpp — what the checkpoint unit tests share (test_checkpoint.cpp,
// test_checkpoint_recovery.cpp): a tiny model, seeded random tensors, a train state, a fixture with
// a fresh run dir per test, and byte-level file edits (damage made on purpose).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"
#include "data/token_dataset.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;

namespace ckpt_test {

inline GPTConfig tiny() {
    GPTConfig c;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 16;
    c.seq_len = 8;
    c.vocab_size = 50;
    return c;
}

/// A flat buffer whose real elements are random and whose padding is NaN (must never be read back).
inline std::vector<float> random_flat(const ParamLayout& L, uint64_t seed) {
    std::vector<float> x(L.total_numel(), std::nanf(""));
    std::mt19937_64 g(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    for (const auto& t : L.tensors())
        for (size_t i = 0; i < t.numel; ++i) x[t.offset + i] = n(g);
    return x;
}

inline TrainState some_state(int64_t step, const std::string& run_id = "run-a") {
    TrainState st;
    st.run_id = run_id;
    st.step = step;
    st.tokens_seen = 123456789012ull;
    st.loader = {3017, 0xF000000000000005ull, {}};  // a seed above INT64_MAX round-trips as its 64 bits
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
                     const std::vector<float>& m, const std::vector<float>& v, const std::string& run = "run-a") {
        return save_checkpoint(dir.string(), some_state(step, run), L, p.data(),
                               {OptimShardView{0, L.total_numel(), m.data(), v.data()}}, keep_last);
    }
    fs::path ck() const { return dir / "checkpoints"; }
};

/// Reads checkpoint d's weights and whole optimizer state (layout L) back and expects them bit for
/// bit p, m and v, tensor by tensor (the first differing tensor of each is named).
inline void expect_reads_back(const std::string& d, const ParamLayout& L, const std::vector<float>& p,
                              const std::vector<float>& m, const std::vector<float>& v) {
    std::vector<float> p2(L.total_numel()), m2(L.total_numel()), v2(L.total_numel());
    read_params(d, L, p2.data());
    read_optim(d, L, 0, L.total_numel(), m2.data(), v2.data());
    for (const auto& [want, got, what] : {std::tuple{&p, &p2, "weights"}, {&m, &m2, "m"}, {&v, &v2, "v"}})
        for (const auto& t : L.tensors())
            if (std::memcmp(want->data() + t.offset, got->data() + t.offset, 4 * t.numel) != 0) {
                ADD_FAILURE() << d << ": " << what << " of " << t.name << " differ";
                break;
            }
}

inline std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void spit(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary | std::ios::trunc) << text; }

/// Re-seals an edited state.toml: a new state_sha256 over the bytes before "[integrity]" (as a
/// careful forger would), so that only the edit itself is left to be caught.
inline std::string reseal(const std::string& text) {
    const std::string body = text.substr(0, text.rfind("\n[integrity]\n") + 1);
    return body + "[integrity]\nstate_sha256 = \"" + sha256_hex(body) + "\"\n";
}

/// XORs one byte of the file at `pos` (a damaged disk block).
inline void flip_byte(const fs::path& p, size_t pos) {
    std::string b = slurp(p);
    ASSERT_LT(pos, b.size());
    b[pos] = char(b[pos] ^ 0x20);
    spit(p, b);
}

}  // namespace ckpt_test

using namespace ckpt_test;
