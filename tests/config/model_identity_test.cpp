// tests/config/model_identity_test.cpp — the model identity (model_identity: every key that changes
// the model's function), the model hash checkpoints record over it (model_config_hash, and the
// legacy text of checkpoints before format 4) and the one check a resume makes
// (model_identity_mismatch), against FNV-1a 64 written out here and checked on the published test
// vector (docs/configuration.md "The model hash").
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "app/config/config.hpp"

using namespace llmtrain;

namespace {
uint64_t fnv1a64_reference(const std::string& s) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
    return h;
}
}  // namespace

TEST(Config, ModelHashIsFnv1aOfTheShape) {
    ASSERT_EQ(fnv1a64_reference("a"), 0xaf63dc4c8601ec8cull);  // published FNV-1a 64 test vector
    Config c;
    char want[17];
    std::snprintf(want, sizeof want, "%016llx",
                  (unsigned long long)fnv1a64_reference(
                      "gpt2:n_layer=4,n_head=4,n_embd=256,seq_len=256,vocab_size=8192"));
    EXPECT_EQ(model_config_hash(c), want);
    const std::string base = model_config_hash(c);
    Config other = c;
    other.optimizer.lr = 0.5f;
    other.run.name = std::string(1, 'x');  // not = "x": GCC 12 -Wstringop-overflow false positive (PR 105651)
    other.training.micro_batch_size = 1;
    EXPECT_EQ(model_config_hash(other), base);  // only the shape counts
    for (auto change : std::vector<void (*)(Config&)>{[](Config& x) { x.model.n_layer++; },
                                                      [](Config& x) { x.model.n_head = 8; },
                                                      [](Config& x) { x.model.n_embd = 512; },
                                                      [](Config& x) { x.model.seq_len++; },
                                                      [](Config& x) { x.model.vocab_size++; }}) {
        Config d = c;
        change(d);
        EXPECT_NE(model_config_hash(d), base);
    }
}

// The model identity: every key that changes the function, in the hash's order; a Llama's
// rope_theta and norm_eps are in it (format 4) while the hash older checkpoints hold leaves them
// out; GPT-2's identity and hash are its five shape keys (its other keys are fixed by the arch).
TEST(Config, ModelIdentityHoldsEveryKeyThatChangesTheFunction) {
    Config g;
    g.model.rope_theta = 123.0f;  // not GPT-2's: no effect on its identity
    EXPECT_EQ(model_identity(gpt_config_of(g)),
              (ModelIdentity{{"arch", "gpt2"}, {"n_layer", "4"}, {"n_head", "4"}, {"n_embd", "256"},
                             {"seq_len", "256"}, {"vocab_size", "8192"}}));
    EXPECT_EQ(model_config_hash(g), model_config_hash(Config{}));
    EXPECT_EQ(legacy_model_config_hash(gpt_config_of(g)), model_config_hash(g));
    const Config c = load_config("", {"model.arch=\"llama\"", "model.n_layer=2", "model.n_head=4", "model.n_embd=64",
                                      "model.seq_len=32", "model.vocab_size=300", "model.n_kv_head=2",
                                      "model.multiple_of=32", "model.rope_theta=500000.0", "model.norm_eps=1e-6"});
    const ModelIdentity want{{"arch", "llama"},         {"n_layer", "2"},        {"n_head", "4"},
                             {"n_embd", "64"},          {"seq_len", "32"},       {"vocab_size", "300"},
                             {"n_kv_head", "2"},        {"intermediate_size", "192"},  // 8/3 x 64 = 171 -> 192
                             {"tie_embeddings", "true"}, {"rope_theta", "500000"}, {"norm_eps", "0.000001"}};
    EXPECT_EQ(model_identity(gpt_config_of(c)), want);
    auto hex = [](const std::string& text) {
        char b[17];
        std::snprintf(b, sizeof b, "%016llx", (unsigned long long)fnv1a64_reference(text));
        return std::string(b);
    };
    const std::string shape = "llama:n_layer=2,n_head=4,n_embd=64,seq_len=32,vocab_size=300,n_kv_head=2,"
                              "intermediate_size=192,tie_embeddings=true";
    EXPECT_EQ(model_config_hash(c), hex(shape + ",rope_theta=500000,norm_eps=0.000001"));
    EXPECT_EQ(legacy_model_config_hash(gpt_config_of(c)), hex(shape));
    for (auto change : std::vector<void (*)(Config&)>{[](Config& x) { x.model.rope_theta = 10000.0f; },
                                                      [](Config& x) { x.model.norm_eps = 1e-5f; },
                                                      [](Config& x) { x.model.tie_embeddings = false; },
                                                      [](Config& x) { x.model.n_kv_head = 4; }}) {
        Config d = c;
        change(d);
        EXPECT_NE(model_config_hash(d), model_config_hash(c));
    }
    Config same = c;  // the same resolved width by another route
    same.model.intermediate_size = 192;
    EXPECT_EQ(model_config_hash(same), model_config_hash(c));

    // The one check resume makes: the key, the checkpoint's value and the config's.
    const GPTConfig mc = gpt_config_of(c);
    Config other = c;
    other.model.rope_theta = 10000.0f;
    EXPECT_EQ(model_identity_mismatch(model_identity(mc), mc, model_config_hash(c), c), "");
    EXPECT_EQ(model_identity_mismatch(model_identity(mc), mc, model_config_hash(c), other),
              "model.rope_theta: the checkpoint has 500000, the config 10000");
    // Before format 4: [model]'s keys stand in when they hash to the old hash; else the hash alone.
    const std::string old_hash = legacy_model_config_hash(mc);
    EXPECT_EQ(model_identity_mismatch({}, mc, old_hash, c), "");
    EXPECT_EQ(model_identity_mismatch({}, mc, old_hash, other), "model.rope_theta: the checkpoint has 500000, the config 10000");
    EXPECT_EQ(model_identity_mismatch({}, GPTConfig{}, old_hash, c), "");  // [model] unknown: by the hash
    EXPECT_NE(model_identity_mismatch({}, GPTConfig{}, old_hash, load_config("", {})).find("differs from the config's"),
              std::string::npos);
    ModelIdentity edited = model_identity(mc);  // a table that does not match its own hash
    EXPECT_NE(model_identity_mismatch(edited, mc, "0123456789abcdef", c).find("edited by hand"), std::string::npos);
}
