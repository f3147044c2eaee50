// tests/app/test_checkpoint_lookup.cpp — which checkpoint a run dir means (app/checkpoint/lookup.cpp):
// resume (resolve_resume "auto"), llmtrain-export and llmtrain-eval (checkpoint_named, which
// export_main.cpp and eval_model.cpp call) must name the same one, also after a rollback, where
// `latest` names an older step than the newest step_* directory (docs/checkpoints.md "Which
// checkpoint a run dir means"). Before, llmtrain-eval took the run's newest step.
#include <gtest/gtest.h>

#include "app/config/config.hpp"
#include "app/eval/eval_model.hpp"
#include "tests/app/checkpoint_test_util.hpp"

using namespace ckpt_test;

namespace {

/// Checkpoint of `step` holding weights p (seeded by the step), with the model hash of tiny()'s
/// GPT-2 so that llmtrain-eval can tell its architecture without a config.toml.
std::string save_step(const fs::path& run_dir, int64_t step, std::vector<float>* p_out = nullptr) {
    const ParamLayout L(tiny());
    auto p = random_flat(L, uint64_t(step)), m = random_flat(L, 100 + uint64_t(step)), v = m;
    for (auto* x : {&p, &m, &v})
        for (float& e : *x) e = std::isnan(e) ? 0.0f : e;  // padding: zero, as eval reads it
    TrainState st = some_state(step);
    Config c;
    c.model.n_layer = st.model.n_layer, c.model.n_head = st.model.n_head, c.model.n_embd = st.model.n_embd;
    c.model.seq_len = st.model.seq_len, c.model.vocab_size = st.model.vocab_size;
    st.model_config_hash = model_config_hash(c);
    if (p_out) *p_out = p;
    return save_checkpoint(run_dir.string(), st, L, p.data(), {OptimShardView{0, L.total_numel(), m.data(), v.data()}}, 0);
}

}  // namespace

TEST_F(Ckpt, RunDirMeansOneCheckpointForResumeExportAndEval) {
    for (int s : {2, 4, 8}) save_step(dir, s);
    std::vector<float> p6;
    const std::string six = save_step(dir, 6, &p6);  // resumed from step_4 by path, then step_6 written
    ASSERT_EQ(slurp(ck() / "latest"), "step_6\n");
    ASSERT_TRUE(fs::exists(ck() / "step_8"));

    EXPECT_EQ(resolve_resume("auto", dir.string(), false).dir, six);  // resume
    EXPECT_EQ(checkpoint_named(dir.string()), six);                   // llmtrain-export RUN_DIR
    const EvalWeights w = load_eval_weights(dir.string());            // llmtrain-eval RUN_DIR
    EXPECT_EQ(w.source, "checkpoint " + six + " (step 6)");
    ASSERT_EQ(w.params.size(), p6.size());
    EXPECT_EQ(std::memcmp(w.params.data(), p6.data(), 4 * p6.size()), 0) << "eval read other weights than step_6's";

    // A checkpoint directory names itself; anything else is not a checkpoint ("").
    const std::string eight = (ck() / "step_8").string();
    EXPECT_EQ(checkpoint_named(eight), eight);
    EXPECT_EQ(checkpoint_named((dir / "nothing_here").string()), "");
    // `latest` damaged: all three fall back alike to the run's newest that verifies.
    spit(ck() / "latest", "step_10\n");
    EXPECT_EQ(resolve_resume("auto", dir.string(), false).dir, eight);
    EXPECT_EQ(checkpoint_named(dir.string()), eight);
    EXPECT_EQ(load_eval_weights(dir.string()).source, "checkpoint " + eight + " (step 8)");
}

TEST_F(Ckpt, RunDirWithoutAVerifyingCheckpointIsRefusedSayingWhy) {
    const std::string two = save_step(dir, 2);
    flip_byte(fs::path(two) / "model.h5", 100);
    try {
        checkpoint_named(dir.string());
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(dir.string() + ": a run directory without a checkpoint that verifies"), std::string::npos) << msg;
        EXPECT_NE(msg.find("skipped step_2: "), std::string::npos) << msg;  // and why
    }
    EXPECT_THROW(checkpoint_named(two), CheckpointError);  // named directly: still verified
}
