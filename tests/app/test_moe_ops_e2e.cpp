// tests/app/test_moe_ops_e2e.cpp — what the trainer does with a mixture of experts' routing
// (app/moe_balance.hpp, app/trainer_moe.cpp; docs/model.md "Mixture of experts"):
//  - MoeBalance and load_imbalance against hand-computed figures (exact);
//  - through the llmtrain binary on the tiny dataset: losses.tsv gets the balance loss every step
//    (kind moe_aux, finite, > 0 with alpha > 0, and exactly 0 with alpha = 0) and each layer's
//    window imbalance at every log line (kind moe_imbalance:<layer>, in [1, E]); the log line names
//    them;
//  - DeepSeek-V3's bias update (model.moe.bias_update_rate) against a hand-computed step; through
//    the binary: 8 steps straight and 4 + 4 resumed give the same losses bit for bit and the same
//    biases in state.toml (the checkpoint keeps them), the biases move, and the update changes the
//    routing (other losses than without it); a softmax router with the key exits 2 naming it;
//  - configs/olmoe-1b-7b.toml and configs/mixtral-8x7b.toml: `--dry-run --world-size 1` prints
//    total and active parameters equal to a closed form written here (exact), and within the
//    published figures' rounding (0.05B: OLMoE 6.9B / 1.3B, Mixtral 46.7B / 12.9B).
#include <cmath>

#include "app/moe_balance.hpp"
#include "tests/app/e2e_util.hpp"

using namespace e2e;

namespace {

const std::vector<std::string> kMoe = {"model.arch=\"llama\"", "model.n_kv_head=1", "model.intermediate_size=48",
                                       "model.moe.n_experts=4", "model.moe.top_k=2", "model.moe.expert_ffn=24",
                                       "model.moe.aux_loss_coef=0.05"};

std::vector<std::string> moe_args(const fs::path& rd, std::vector<std::string> sets) {
    sets.insert(sets.begin(), kMoe.begin(), kMoe.end());
    return llmtrain_args(rd, sets);
}

/// losses.tsv rows of one kind: step -> value (column 3).
std::map<int64_t, double> rows_of(const fs::path& rd, const std::string& kind) {
    std::ifstream f(rd / "losses.tsv");
    std::map<int64_t, double> out;
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string step, k, v;
        std::getline(ls, step, '\t');
        std::getline(ls, k, '\t');
        std::getline(ls, v, '\t');
        if (k == kind) out[std::stoll(step)] = std::stod(v);
    }
    return out;
}

}  // namespace

TEST(MoeBalance, ImbalanceIsMaxOverMean) {
    const int64_t even[4] = {5, 5, 5, 5}, one[4] = {0, 20, 0, 0}, some[4] = {1, 2, 3, 6}, none[4] = {0, 0, 0, 0};
    EXPECT_EQ(llmtrain::load_imbalance(even, 4), 1.0);
    EXPECT_EQ(llmtrain::load_imbalance(one, 4), 4.0);
    EXPECT_EQ(llmtrain::load_imbalance(some, 4), 2.0);  // 6 / (12 / 4)
    EXPECT_EQ(llmtrain::load_imbalance(none, 4), 0.0);
}

TEST(MoeBalance, TheWindowSumsStepsAndItsLineClearsIt) {
    llmtrain::MoeBalance b(2, 2);
    b.add_step(0.5, {1, 3, 2, 2});
    b.add_step(0.25, {3, 1, 4, 0});
    EXPECT_EQ(b.step_load, (std::vector<int64_t>{3, 1, 4, 0}));
    EXPECT_EQ(b.window_load, (std::vector<int64_t>{4, 4, 6, 2}));
    EXPECT_EQ(b.window_imbalance(0), 1.0);
    EXPECT_EQ(b.window_imbalance(1), 1.5);  // 6 / (8 / 2)
    // by expert over both layers: 10 and 6 of 16 pairs
    EXPECT_EQ(b.take_window_line(7, 9),
              "step 7/9 | moe aux 0.25 | load max/mean by layer 1.00 1.50 | by expert (all layers) 62.5% 37.5%");
    EXPECT_EQ(b.window_load, (std::vector<int64_t>(4, 0)));
    EXPECT_THROW(b.add_step(0, {1, 2}), std::invalid_argument);
}

TEST(MoeBalance, BiasUpdateIsMinusRateTimesSignOfLoadMinusMean) {
    llmtrain::MoeBalance b(2, 4);
    b.add_step(0, {3, 1, 2, 2, 0, 0, 8, 0});  // layer 0: mean 2; layer 1: mean 2
    b.update_bias(0.5f);
    EXPECT_EQ(b.bias, (std::vector<float>{-0.5f, 0.5f, 0.0f, 0.0f, 0.5f, 0.5f, -0.5f, 0.5f}));
    b.add_step(0, {1, 1, 1, 2, 2, 2, 2, 2});  // layer 0: mean 5/4 (exact in integers); layer 1 even
    b.update_bias(0.25f);
    EXPECT_EQ(b.bias, (std::vector<float>{-0.25f, 0.75f, 0.25f, -0.25f, 0.5f, 0.5f, -0.5f, 0.5f}));
}

TEST_F(E2E, MoeLogsTheBalanceLossAndTheLoad) {
    const fs::path a = case_dir() / "alpha", z = case_dir() / "zero";
    const std::vector<std::string> sets = {"run.max_steps=6", "run.log_interval=2", "training.grad_accum_steps=2"};
    Proc pa = run(moe_args(a, sets));
    ASSERT_EQ(pa.code, 0) << pa.err;
    auto with_zero = sets;
    with_zero.push_back("model.moe.aux_loss_coef=0");
    Proc pz = run(moe_args(z, with_zero));
    ASSERT_EQ(pz.code, 0) << pz.err;
    const auto aux = rows_of(a, "moe_aux"), aux0 = rows_of(z, "moe_aux");
    ASSERT_EQ(aux.size(), 6u);
    ASSERT_EQ(aux0.size(), 6u);
    for (const auto& [s, v] : aux) {
        EXPECT_TRUE(std::isfinite(v) && v > 0.0) << s << " " << v;
        // sum_e f_e P_e <= max_e P_e <= 1: at most alpha * E per layer, 2 layers
        EXPECT_LE(v, 2 * 0.05 * 4 + 1e-6) << s;
        EXPECT_EQ(aux0.at(s), 0.0) << s;
    }
    for (int l = 0; l < 2; ++l) {
        const auto imb = rows_of(a, "moe_imbalance:" + std::to_string(l));
        EXPECT_EQ(imb.size(), 4u) << l;  // steps 1, 2, 4, 6: the log lines
        for (const auto& [s, v] : imb) EXPECT_TRUE(v >= 1.0 && v <= 4.0) << "layer " << l << " step " << s << " " << v;
    }
    EXPECT_NE(pa.out.find("step 6/6 | moe aux "), std::string::npos) << pa.out;
    EXPECT_NE(pa.out.find("| load max/mean by layer "), std::string::npos) << pa.out;
}

/// state.toml's [moe] bias lines (the text between "[moe]" and the next table).
std::string bias_text(const fs::path& ckpt) {
    const std::string s = read_file(ckpt / "state.toml");
    const size_t at = s.find("[moe]");
    if (at == std::string::npos) return "";
    return s.substr(at, s.find("\n[", at + 1) - at);
}

TEST_F(E2E, MoeBiasUpdateResumesBitwiseExact) {
    const std::vector<std::string> common = {"model.moe.router=\"sigmoid\"", "model.moe.bias_update_rate=0.01",
                                             "lr_schedule.decay=\"constant\"", "training.grad_accum_steps=2",
                                             "checkpoint.interval=4"};
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.end(), common.begin(), common.end());
        return v;
    };
    const fs::path a = case_dir() / "straight", b = case_dir() / "resumed", off = case_dir() / "off";
    Proc pa = run(moe_args(a, with({"run.max_steps=8"})));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb1 = run(moe_args(b, with({"run.max_steps=4"})));
    ASSERT_EQ(pb1.code, 0) << pb1.err;
    Proc pb2 = run(moe_args(b, with({"run.max_steps=8"})));
    ASSERT_EQ(pb2.code, 0) << pb2.err;
    EXPECT_NE(pb2.out.find("resume: from " + (b / "checkpoints" / "step_4").string()), std::string::npos) << pb2.out;
    const auto la = train_losses(a), lb = train_losses(b);
    ASSERT_EQ(la.size(), 8u);
    for (int s = 1; s <= 8; ++s) EXPECT_EQ(la.at(s), lb.at(s)) << "step " << s;
    const std::string ba = bias_text(a / "checkpoints" / "step_8");
    EXPECT_NE(ba.find("bias = [ [ "), std::string::npos) << ba;  // two layers' rows of four
    EXPECT_EQ(ba, bias_text(b / "checkpoints" / "step_8"));
    EXPECT_NE(ba, bias_text(a / "checkpoints" / "step_4"));  // they move
    // Without the update (rate 0, the same sigmoid router) the routing differs after step 1.
    Proc po = run(moe_args(off, {"model.moe.router=\"sigmoid\"", "lr_schedule.decay=\"constant\"",
                                 "training.grad_accum_steps=2", "run.max_steps=8"}));
    ASSERT_EQ(po.code, 0) << po.err;
    const auto lo = train_losses(off);
    EXPECT_EQ(lo.at(1), la.at(1));  // the first step routes with zero biases
    bool differs = false;
    for (int s = 2; s <= 8; ++s) differs = differs || lo.at(s) != la.at(s);
    EXPECT_TRUE(differs);
    EXPECT_EQ(bias_text(off / "checkpoints" / "step_8"), "");  // nothing kept without the update

    Proc bad = run(moe_args(case_dir() / "bad", {"model.moe.bias_update_rate=0.01", "run.max_steps=1"}));
    EXPECT_EQ(bad.code, 2) << bad.err;
    EXPECT_NE(bad.err.find("model.moe.bias_update_rate: the selection bias"), std::string::npos) << bad.err;
}

/// Total and active parameters of an untied Llama MoE without shared experts, closed form: the
/// token table and the head V*C each, per layer the attention (q, o: C*C; k, v: C*kv_dim), two
/// RMSNorms, the router E*C and E experts of 3*Fe*C (active: k of them), and the final norm.
std::pair<int64_t, int64_t> moe_params(int64_t L, int64_t C, int64_t heads, int64_t kv_heads, int64_t V, int64_t E,
                                       int64_t k, int64_t Fe) {
    const int64_t kv = C / heads * kv_heads;
    const int64_t shared = 2 * V * C + C + L * (2 * C * C + 2 * C * kv + 2 * C + E * C);
    return {shared + L * E * 3 * Fe * C, shared + L * k * 3 * Fe * C};
}

/// The same for Qwen3-MoE's attention (QK-norm, a head size hd of its own): q and o C*H*hd each, k
/// and v C*KV*hd, the q_norm and k_norm weights hd each.
std::pair<int64_t, int64_t> qwen3_moe_params(int64_t L, int64_t C, int64_t heads, int64_t kv_heads, int64_t hd,
                                             int64_t V, int64_t E, int64_t k, int64_t Fe) {
    const int64_t shared =
        2 * V * C + C + L * (2 * C * heads * hd + 2 * C * kv_heads * hd + 2 * C + 2 * hd + E * C);
    return {shared + L * E * 3 * Fe * C, shared + L * k * 3 * Fe * C};
}

TEST_F(E2E, MoeConfigsCountThePublishedParameters) {
    struct Case {
        const char* config;
        std::pair<int64_t, int64_t> closed;
        double published_total, published_active;  // billions, as the papers round them
        double within = 0.05;                       // billions
    };
    // Qwen3-30B-A3B's model card: 30.5B total, 3.3B activated (3.35B counted: the card rounds down).
    for (const Case& c : {Case{"olmoe-1b-7b", moe_params(16, 2048, 16, 16, 50304, 64, 8, 1024), 6.9, 1.3},
                          Case{"mixtral-8x7b", moe_params(32, 4096, 32, 8, 32000, 8, 2, 14336), 46.7, 12.9},
                          Case{"qwen3-30b-a3b", qwen3_moe_params(48, 2048, 32, 4, 128, 151936, 128, 8, 768), 30.5,
                               3.3, 0.06}}) {
        Proc p = run({LLMTRAIN_BIN, "--config", std::string(LLMTRAIN_SOURCE_DIR) + "/configs/" + c.config + ".toml",
                      "--dry-run", "--world-size", "1"});
        ASSERT_EQ(p.code, 0) << c.config << "\n" << p.err;
        const std::string want = "mixture of experts: " + std::to_string(c.closed.first) + " parameters, " +
                                 std::to_string(c.closed.second) + " active per token";
        EXPECT_NE(p.out.find(want), std::string::npos) << c.config << ": want " << want << "\n" << p.out;
        EXPECT_LE(std::abs(double(c.closed.first) / 1e9 - c.published_total), c.within) << c.config;
        EXPECT_LE(std::abs(double(c.closed.second) / 1e9 - c.published_active), c.within) << c.config;
    }
}

int main(int argc, char** argv) { return e2e_main(argc, argv); }
