// tests/app/test_moe_e2e.cpp — the mixture-of-experts Llama ([model.moe]; docs/model.md "Mixture of
// experts") through the llmtrain binary on the tiny dataset (ctest fixture):
//  - exact resume: 8 steps straight against 4 + 4 resumed, every step's loss and the final tensors
//    (experts and router included) bit for bit, as ResumeIsBitwiseExact does for the dense model;
//  - a resume into another expert count or top_k is refused naming the key (the model identity);
//  - llmtrain-export refuses a MoE checkpoint, saying so (not supported yet);
//  - dp 2 with ZeRO-1 against one rank accumulating the same windows, 1e-5 relative per step;
//  - config errors exit 2 naming the key: MoE with gpt2, top_k past n_experts, training.fp8.
#include <cmath>
#include <cstring>

#include "model/param_layout.hpp"
#include "tests/app/e2e_util.hpp"

using namespace e2e;

namespace {

const std::vector<std::string> kMoe = {"model.arch=\"llama\"", "model.n_kv_head=1", "model.intermediate_size=48",
                                       "model.moe.n_experts=4", "model.moe.top_k=2", "model.moe.expert_ffn=24",
                                       "model.moe.n_shared_experts=1", "model.moe.aux_loss_coef=0.05"};

std::vector<std::string> moe_args(const fs::path& rd, std::vector<std::string> sets) {
    sets.insert(sets.begin(), kMoe.begin(), kMoe.end());
    return llmtrain_args(rd, sets);
}

}  // namespace

TEST_F(E2E, MoeResumeIsBitwiseExact) {
    const std::vector<std::string> common = {"lr_schedule.decay=\"constant\"", "training.grad_accum_steps=2"};
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.end(), common.begin(), common.end());
        return v;
    };
    const fs::path a = case_dir() / "straight", b = case_dir() / "resumed";
    Proc straight = run(moe_args(a, with({"run.max_steps=8"})));
    ASSERT_EQ(straight.code, 0) << straight.err;
    Proc pb1 = run(moe_args(b, with({"run.max_steps=4"})));
    ASSERT_EQ(pb1.code, 0) << pb1.err;
    Proc pb2 = run(moe_args(b, with({"run.max_steps=8"})));
    ASSERT_EQ(pb2.code, 0) << pb2.err;
    EXPECT_NE(pb2.out.find("resume: from " + (b / "checkpoints" / "step_4").string()), std::string::npos) << pb2.out;
    auto la = train_losses(a), lb = train_losses(b);
    ASSERT_EQ(la.size(), 8u);
    ASSERT_EQ(lb.size(), 8u);
    for (int s = 1; s <= 8; ++s) EXPECT_EQ(la[s], lb[s]) << "step " << s;
    EXPECT_NE(la[1], la[8]);  // it trains
    GPTConfig g = tiny_gpt();  // kMoe's model
    g.arch = Arch::llama, g.n_kv_head = 1, g.intermediate_size = 48;
    g.moe_experts = 4, g.moe_top_k = 2, g.moe_expert_ffn = 24, g.moe_shared_experts = 1;
    const ParamLayout L(g);
    std::vector<float> pa(L.total_numel()), pb(L.total_numel());  // the experts' 3-D tensors included
    read_params((a / "checkpoints" / "step_8").string(), L, pa.data());
    read_params((b / "checkpoints" / "step_8").string(), L, pb.data());
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * 4), 0);
    EXPECT_EQ(sample_at(straight.out, 6), sample_at(pb2.out, 6));
    EXPECT_NE(sample_at(straight.out, 6), "<none>");

    // HuggingFace's Mixtral layout has no shared experts: the export refuses, naming the key
    // (llmtrain-export beside llmtrain; the exports it does write: tests/app/interop_moe_test.py).
    const fs::path exporter = fs::path(LLMTRAIN_BIN).parent_path() / "llmtrain-export";
    if (fs::exists(exporter)) {
        Proc ex = run({exporter.string(), (b / "checkpoints" / "step_8").string(), (case_dir() / "hf").string(),
                       "--format", "hf"});
        EXPECT_EQ(ex.code, 1);
        EXPECT_NE(ex.err.find("model.moe.n_shared_experts = 1: MixtralForCausalLM has no shared experts"),
                  std::string::npos) << ex.err;
    }

    // Another expert count or top_k is another model: refused, naming the key.
    for (const auto& [set, want] : std::vector<std::pair<std::string, std::string>>{
             {"model.moe.top_k=1", "model.moe.top_k: the checkpoint has 2, the config 1"},
             {"model.moe.n_experts=3", "model.moe.n_experts: the checkpoint has 4, the config 3"}}) {
        Proc r = run(moe_args(b, with({"run.max_steps=10", set})));
        EXPECT_EQ(r.code, 1) << set << "\n" << r.err;
        EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    }
}

// Data parallelism with ZeRO-1: 2 ranks of micro-batch 2 against 1 rank accumulating 2 micro-batches
// of 2 over the same windows (the loader's sharding rule gives rank r the windows accumulation
// step r reads): the same objective, so every step's loss within 1e-5 relative (the sums differ in
// order only). The balance loss's gradient scales with dloss like the cross-entropy's, so it
// averages over ranks as over accumulation steps.
TEST_F(E2E, MoeDataParallelMatchesOneRank) {
    const std::vector<std::string> common = {"run.max_steps=4", "training.global_batch_size=4", "run.eval_interval=0",
                                             "run.sample_interval=0", "lr_schedule.decay=\"constant\""};
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.end(), common.begin(), common.end());
        return v;
    };
    const fs::path one = case_dir() / "one", two = case_dir() / "two";
    Proc p1 = run(moe_args(one, with({})));
    ASSERT_EQ(p1.code, 0) << p1.err;
    Proc p2 = run(under_mpirun(moe_args(two, with({"parallel.zero_stage=1"})), 2));
    ASSERT_EQ(p2.code, 0) << p2.err;
    auto l1 = train_losses(one), l2 = train_losses(two);
    ASSERT_EQ(l1.size(), 4u);
    ASSERT_EQ(l2.size(), 4u);
    for (int s = 1; s <= 4; ++s) {
        const double a = std::stod(l1[s]), b = std::stod(l2[s]);
        EXPECT_LE(std::fabs(a - b), 1e-5 * std::fabs(a)) << "step " << s << ": " << l1[s] << " vs " << l2[s];
    }
}

TEST_F(E2E, MoeConfigErrorsNameTheKey) {
    const fs::path rd = case_dir() / "run";
    for (const auto& [sets, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"model.arch=\"gpt2\"", "model.n_kv_head=0", "model.intermediate_size=0"},
              "model.moe.n_experts: mixture of experts needs model.arch = \"llama\""},
             {{"model.moe.top_k=5"}, "model.moe.top_k: expected 1..model.moe.n_experts (4), got 5"},
             {{"training.fp8=\"tensorwise\""},
              "model.moe.n_experts: mixture of experts does not run with training.fp8 yet"}}) {
        Proc r = run(moe_args(rd, sets));
        EXPECT_EQ(r.code, 2) << sets[0] << "\n" << r.err;
        EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(rd)) << sets[0];
    }
}

int main(int argc, char** argv) { return e2e_main(argc, argv); }
