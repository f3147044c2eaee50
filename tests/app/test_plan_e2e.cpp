// tests/app/test_plan_e2e.cpp — llmtrain-plan and pipeline.plan = "auto" end to end, against what the
// planned run then measures:
//  - memory: each stage's predicted device bytes equal the Allocator's peak of a pp = 2 run of the
//    plan within 2% (tiny.toml's shape, and the same with 12 layers; and on 4 ranks at ZeRO-1 pp 2 x
//    dp 2 (--tp 1) and the planner's own choice there, pp 2 x tp 2), with a cap that forces recomputation;
//  - time: the predicted step within 15% of the median measured step of the same plan on the CPU at
//    pp = 2, one thread per rank (registered RUN_SERIAL: timings need the two cores to themselves;
//    one second attempt when the first misses, for a profile disturbed by this shared VM);
//  - a model that fits nowhere: exit 1 and the nearest changes that would fit; bad flags: exit 2;
//  - pipeline.plan = "auto": rank 0 plans, both stages run its lists; nothing fitting is exit 2; at
//    pp 2 x tp 2 it keeps the run's tp and each stage's predicted bytes are every rank's peak within 2%;
//  - with a mixture of experts (moe-tiny.toml): "auto" at pp 2, ep 1 and ep 2, trains bitwise as the
//    planned lists set by hand; the profiled step against the run (by hand only, not in ctest).
#include <regex>

#include "tests/app/e2e_util.hpp"

using namespace e2e;

namespace {

const fs::path kConfigs = fs::path(__FILE__).parent_path().parent_path().parent_path() / "configs";

/// tiny.toml (or `config`) on the tiny dataset (its vocabulary), extra overrides appended, as --set pairs.
std::vector<std::string> tiny_sets(const std::vector<std::string>& extra, const std::string& config = "tiny.toml") {
    std::vector<std::string> sets = {"model.vocab_size=" + std::to_string(tiny_vocab()),
                                     "data.train=\"" + kData + "/train.h5\"", "data.val=\"" + kData + "/val.h5\"",
                                     "metrics.enabled=false", "run.eval_interval=0", "run.sample_interval=0",
                                     "run.log_interval=1", "checkpoint.interval=0"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    std::vector<std::string> a = {"--config", (kConfigs / config).string()};
    for (const auto& s : sets) a.insert(a.end(), {"--set", s});
    return a;
}

std::vector<std::string> plan_cmd(const std::vector<std::string>& sets, const std::vector<std::string>& flags,
                                  const std::string& config = "tiny.toml") {
    std::vector<std::string> a = {LLMTRAIN_PLAN_BIN};
    for (const auto& s : tiny_sets(sets, config)) a.push_back(s);
    a.insert(a.end(), flags.begin(), flags.end());
    return a;
}

std::vector<std::string> train_cmd(const fs::path& rd, const std::vector<std::string>& sets, int ranks,
                                   const std::string& config = "tiny.toml") {
    std::vector<std::string> a = {LLMTRAIN_BIN};
    std::vector<std::string> all = sets;
    all.push_back("run.run_dir=\"" + rd.string() + "\"");
    for (const auto& s : tiny_sets(all, config)) a.push_back(s);
    return under_mpirun(a, ranks);
}

/// The plan's per-stage rows: stage -> {layers, ckpt, device MiB}.
std::map<int, std::array<double, 3>> plan_rows(const std::string& out) {
    std::map<int, std::array<double, 3>> rows;
    std::istringstream in(out);
    std::string line;
    bool table = false;
    while (std::getline(in, line)) {
        if (line.rfind("stage layers ckpt", 0) == 0) {
            table = true;
            continue;
        }
        if (!table) continue;
        if (line.rfind("TOML", 0) == 0) break;
        std::istringstream f(line.substr(0, line.find('|')));
        std::vector<double> v;
        for (double x; f >> x;) v.push_back(x);
        if (v.size() >= 5) rows[int(v[0])] = {v[1], v[2], v.back()};
    }
    return rows;
}

/// The TOML lines' lists: {pipeline.layers_per_stage, activation_checkpoint.layers_per_stage} as text.
std::pair<std::string, std::string> plan_lists(const std::string& out) {
    const std::regex re(R"(layers_per_stage = (\[[0-9, ]*\]))");
    std::vector<std::string> found;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
        found.push_back((*it)[1]);
    if (found.size() != 2) return {"", ""};
    return {found[0], found[1]};
}

/// The start-up summary's stage lines ("stage 0: layers [0, k), c recomputed", stages 0 and 1) as
/// plan_lists' text: {"[layers of 0, layers of 1]", "[recomputed of 0, recomputed of 1]"}.
std::pair<std::string, std::string> summary_lists(const std::string& out) {
    const std::regex stage(R"(stage ([01]): layers \[([0-9]+), ([0-9]+)\), ([0-9]+) recomputed)");
    std::string layers = "[", ckpt = "[";
    for (auto it = std::sregex_iterator(out.begin(), out.end(), stage); it != std::sregex_iterator(); ++it) {
        const std::string sep = (*it)[1] == "0" ? "" : ", ";
        layers += sep + std::to_string(std::stoi((*it)[3]) - std::stoi((*it)[2]));
        ckpt += sep + (*it)[4].str();
    }
    return {layers + "]", ckpt + "]"};
}

/// "peak device memory (MiB): rank 0 (stage 0) 247.60, rank 1 (stage 1) 218.51" -> rank -> MiB.
std::map<int, double> peaks(const std::string& out) {
    std::map<int, double> m;
    const std::regex re(R"(rank ([0-9]+) \(stage [0-9]+\) ([0-9.]+))");
    const size_t at = out.find("peak device memory");
    if (at == std::string::npos) return m;
    const std::string line = out.substr(at, out.find('\n', at) - at);
    for (auto it = std::sregex_iterator(line.begin(), line.end(), re); it != std::sregex_iterator(); ++it)
        m[std::stoi((*it)[1])] = std::stod((*it)[2]);
    return m;
}

double number_after(const std::string& out, const std::string& key) {
    const size_t at = out.find(key);
    return at == std::string::npos ? -1 : std::stod(out.substr(at + key.size()));
}

/// Plans tiny.toml's shape (n_layer layers) at pp 2 on `ranks` ranks (tp x cp x dp = ranks / 2, at `zero`;
/// the run takes the plan's tp and cp),
/// layer times from FLOPs, under a cap 3% below what it needs without recomputation, runs the plan for 2 steps (a checkpoint
/// at the end) and compares each stage's peak, on every rank.
void expect_memory_as_planned(int n_layer, int ranks, int zero, int tp = 0) {
    SCOPED_TRACE("n_layer " + std::to_string(n_layer) + ", ranks " + std::to_string(ranks) + ", --tp " +
                 std::to_string(tp));
    const std::vector<std::string> sets = {"model.n_layer=" + std::to_string(n_layer), "model.seq_len=128",
                                           "training.micro_batch_size=2", "training.grad_accum_steps=4",
                                           "parallel.pp=2", "parallel.zero_stage=" + std::to_string(zero)};
    // FLOP-derived times, not --profile: the split must not follow timing noise between the two plans
    // (a noisy profile once chose another split that met the tight cap without recomputation).
    std::vector<std::string> flags = {"--world-size", std::to_string(ranks), "--pp", "2", "--device-tflops", "0.1"};
    // A given tp plans at cp 1 (pp 2 x dp 2 at tp 1; cp is the planner's choice only without --tp).
    if (tp > 0) flags.insert(flags.end(), {"--tp", std::to_string(tp), "--cp", "1"});  // else the planner's choice
    auto with_memory = [&](double mib) {
        auto f = flags;
        f.insert(f.end(), {"--device-memory", std::to_string(mib) + "MiB"});
        return f;
    };
    Proc loose = run(plan_cmd(sets, with_memory(4096)));
    ASSERT_EQ(loose.code, 0) << loose.err << loose.out;
    double need = 0;
    for (const auto& [s, row] : plan_rows(loose.out)) need = std::max(need, row[2]);
    ASSERT_GT(need, 0) << loose.out;
    Proc tight = run(plan_cmd(sets, with_memory(0.97 * need / 0.9)));  // the default margin keeps 10% free
    ASSERT_EQ(tight.code, 0) << tight.err << tight.out;
    const auto rows = plan_rows(tight.out);
    ASSERT_EQ(rows.size(), 2u) << tight.out;
    EXPECT_GT(rows.at(0)[1] + rows.at(1)[1], 0) << "the cap should force recomputation\n" << tight.out;
    const auto [layers, ckpt] = plan_lists(tight.out);
    ASSERT_FALSE(layers.empty()) << tight.out;
    auto run_sets = sets;
    // The planner also chooses tp (pp 2 on 4 ranks: tp 1 x dp 2 or tp 2 x dp 1); the run takes its choice.
    std::smatch tpm;
    ASSERT_TRUE(std::regex_search(tight.out, tpm, std::regex(R"(\n  tp = ([0-9]+)\n)"))) << tight.out;
    if (tp == 0 && ranks == 4) {
        EXPECT_EQ(tpm[1].str(), "2") << "expected the planner to pick tp 2\n" << tight.out;
    }
    // And cp: a stage's peak does not depend on the batch beyond the micro-batches in flight
    // (min(m, pp - stage) either way), so the run keeps grad_accum_steps.
    std::smatch cpm;
    ASSERT_TRUE(std::regex_search(tight.out, cpm, std::regex(R"(\n  cp = ([0-9]+)\n)"))) << tight.out;
    run_sets.insert(run_sets.end(), {"run.max_steps=2", "pipeline.layers_per_stage=" + layers,
                                     "activation_checkpoint.layers_per_stage=" + ckpt, "parallel.tp=" + tpm[1].str(),
                                     "parallel.cp=" + cpm[1].str()});
    Proc train = run(train_cmd(case_dir() / ("run" + std::to_string(n_layer) + "_" + std::to_string(ranks) + "_" +
                                             std::to_string(tp)),
                               run_sets, ranks));
    ASSERT_EQ(train.code, 0) << train.err;
    const auto measured = peaks(train.out);
    ASSERT_EQ(measured.size(), size_t(ranks)) << train.out;
    for (const auto& [rank, mib] : measured) {
        const int s = rank / (ranks / 2);
        const double predicted = rows.at(s)[2];
        EXPECT_NEAR(mib, predicted, 0.02 * predicted) << "rank " << rank << ", stage " << s << "\n" << tight.out;
        EXPECT_LE(predicted, 0.97 * need * 1.0001) << "stage " << s << " over the cap";
    }
}

}  // namespace

TEST_F(E2E, PlanMemoryMatchesTheRunsPeak) {
    expect_memory_as_planned(4, 2, 0);
    expect_memory_as_planned(12, 2, 0);
    expect_memory_as_planned(12, 4, 1, 1);  // pp 2 x dp 2 at ZeRO-1: sharded optimizer, gathered checkpoint
    expect_memory_as_planned(12, 4, 1);     // the planner's choice: pp 2 x tp 2 (dp 1), 8 micro-batches
}

namespace {

/// One attempt of PlanStepTimeMatchesTheRun: profile and plan 12 layers at pp 2 (4 micro-batches),
/// run the plan on 2 ranks for 8 steps; returns {predicted, measured} step seconds, measured as the
/// median of steps 3-8 (steps 1-2 warm up). `dir` holds the run.
std::pair<double, double> predicted_and_measured_step(const fs::path& dir, const std::string& config = "tiny.toml") {
    const std::vector<std::string> sets = {config == "tiny.toml" ? "model.n_layer=12" : "model.n_layer=4",
                                           "training.grad_accum_steps=4", "parallel.pp=2"};
    Proc plan = run(plan_cmd(sets, {"--world-size", "2", "--pp", "2", "--profile", "--reps", "9", "--device-memory", "4GiB"},
                             config));
    EXPECT_EQ(plan.code, 0) << plan.err << plan.out;
    const double predicted = number_after(plan.out, "predicted step ");
    EXPECT_GT(predicted, 0) << plan.out;
    if (plan.code != 0 || !(predicted > 0)) return {0, 0};
    const auto [layers, ckpt] = plan_lists(plan.out);
    auto run_sets = sets;
    run_sets.insert(run_sets.end(), {"run.max_steps=8", "pipeline.layers_per_stage=" + layers,
                                     "activation_checkpoint.layers_per_stage=" + ckpt});
    Proc train = run(train_cmd(dir, run_sets, 2, config));
    EXPECT_EQ(train.code, 0) << train.err;
    // "step 3/8 | ... | 4,135 tok/s |": seconds = tokens per step / tok/s, 4 x 4 x 256 tokens per step.
    const std::regex re(R"(step ([0-9]+)/8 \|[^\n]*\| ([0-9,]+) tok/s)");
    std::vector<double> secs;
    for (auto it = std::sregex_iterator(train.out.begin(), train.out.end(), re); it != std::sregex_iterator(); ++it) {
        if (std::stoi((*it)[1]) < 3) continue;
        std::string v = (*it)[2];
        v.erase(std::remove(v.begin(), v.end(), ','), v.end());
        secs.push_back(4.0 * 4 * 256 / std::stod(v));
    }
    EXPECT_EQ(secs.size(), 6u) << train.out;
    if (secs.size() != 6u) return {predicted, 0};
    std::sort(secs.begin(), secs.end());
    const double measured = (secs[2] + secs[3]) / 2;
    std::printf("predicted step %.4f s, measured %.4f s (median of steps 3-8): %+.1f%%\n", predicted, measured,
                100 * (predicted / measured - 1));
    if (std::abs(predicted - measured) > 0.15 * measured) std::printf("%s", plan.out.c_str());
    return {predicted, measured};
}

}  // namespace

TEST_F(E2E, PlanStepTimeMatchesTheRun) {
    // The profile and the run on this machine, one OpenMP thread per process (the ctest
    // environment). Tolerance 15% (the issue's). The profile is a few seconds of one process, so a
    // disturbance of this shared 2-core VM in that window moves the whole prediction (seen in CI:
    // +15.9% and +27%, while on the idle machine it reads -8.1% to +2.1%); a second attempt, profile
    // and run again, is allowed, and the test fails only if both miss. A model error fails both.
    std::vector<std::pair<double, double>> tries;
    for (int attempt = 0; attempt < 2; ++attempt) {
        tries.push_back(predicted_and_measured_step(case_dir() / ("run" + std::to_string(attempt))));
        const auto [predicted, measured] = tries.back();
        if (HasFailure()) return;
        if (std::abs(predicted - measured) <= 0.15 * measured) return;
    }
    for (const auto& [predicted, measured] : tries)
        ADD_FAILURE() << "predicted step " << predicted << " s differs from the measured " << measured
                      << " s by more than 15%";
}

TEST_F(E2E, PlanMoeStepTimeMatchesTheRun) {
    // moe-tiny.toml (4 layers of 8 experts, top-2) as PlanStepTimeMatchesTheRun: --profile times the MoE
    // layers (router, the experts each token runs, balance loss) and the plan's predicted step is
    // checked against 2 ranks running it, within the same 15% and with the same second attempt. Not
    // in ctest (timings need the two cores to themselves); run it by hand:
    // test_plan_e2e --gtest_filter=E2E.PlanMoeStepTimeMatchesTheRun
    std::vector<std::pair<double, double>> tries;
    for (int attempt = 0; attempt < 2; ++attempt) {
        tries.push_back(predicted_and_measured_step(case_dir() / ("run" + std::to_string(attempt)), "moe-tiny.toml"));
        const auto [predicted, measured] = tries.back();
        if (HasFailure()) return;
        if (std::abs(predicted - measured) <= 0.15 * measured) return;
    }
    for (const auto& [predicted, measured] : tries)
        ADD_FAILURE() << "predicted step " << predicted << " s differs from the measured " << measured
                      << " s by more than 15%";
}

TEST_F(E2E, PlanThatCannotFitSaysWhatWould) {
    // One rank whose cap is 80% of the least tiny.toml can need there (every layer recomputed, the
    // optimizer offloaded): no plan fits, exit 1. Half the micro-batch halves the activations, and a
    // device 1.5x larger holds the whole: the report names both, and planning each fits (exit 0).
    const std::vector<std::string> sets = {"training.micro_batch_size=8"};
    auto least = sets;
    least.push_back("optimizer.offload=\"cpu\"");
    Proc loose = run(plan_cmd(least, {"--world-size", "1", "--device-tflops", "1", "--device-memory", "4GiB",
                                      "--compare"}));
    ASSERT_EQ(loose.code, 0) << loose.err << loose.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(loose.out, m, std::regex(R"(full recompute\s+yes\s+([0-9.]+))"))) << loose.out;
    const std::string memory = std::to_string(0.8 * std::stod(m[1]) / 0.9) + "MiB";  // the margin keeps 10% free
    Proc p = run(plan_cmd(sets, {"--world-size", "1", "--device-tflops", "1", "--device-memory", memory}));
    EXPECT_EQ(p.code, 1) << p.err << p.out;
    EXPECT_NE(p.out.find("nothing fits"), std::string::npos) << p.out;
    EXPECT_NE(p.out.find("would fit: training.micro_batch_size = 4"), std::string::npos) << p.out;
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(would fit: a device with ([0-9]+) MiB)"))) << p.out;
    const std::string larger = m[1].str() + "MiB";
    Proc half = run(plan_cmd({"training.micro_batch_size=4", "training.global_batch_size=8"},
                             {"--world-size", "1", "--device-tflops", "1", "--device-memory", memory}));
    EXPECT_EQ(half.code, 0) << half.out;
    Proc big = run(plan_cmd(sets, {"--world-size", "1", "--device-tflops", "1", "--device-memory", larger}));
    EXPECT_EQ(big.code, 0) << big.out;
}

TEST_F(E2E, PlanBadFlagsExit2) {
    const std::vector<std::vector<std::string>> bad = {
        {"--device-memory", "1GiB", "--profile"},                                   // no --world-size
        {"--world-size", "2", "--profile"},                                         // no --device-memory
        {"--world-size", "2", "--device-memory", "1GiB"},                           // no time source
        {"--world-size", "2", "--device-memory", "1GiB", "--profile", "--device-tflops", "100"},
        {"--world-size", "2", "--device-memory", "12XB", "--profile"},
        {"--world-size", "2", "--device-memory", "1GiB", "--profile", "--pp", "3"},
        {"--world-size", "8", "--device-memory", "1GiB", "--profile", "--pp", "8"},  // > n_layer = 4
        {"--world-size", "2", "--device-memory", "1GiB", "--profile", "--memory-margin", "2"},
    };
    for (const auto& flags : bad) {
        Proc p = run(plan_cmd({}, flags));
        EXPECT_EQ(p.code, 2) << p.err;
        EXPECT_FALSE(p.err.empty());
    }
    Proc key = run(plan_cmd({"model.n_layers=3"}, {"--world-size", "2", "--device-memory", "1GiB", "--profile"}));
    EXPECT_EQ(key.code, 2) << key.err;
    EXPECT_NE(key.err.find("model.n_layers"), std::string::npos) << key.err;
    Proc mem = run(plan_cmd({}, {"--world-size", "2", "--device-memory", "12XB", "--profile"}));
    EXPECT_NE(mem.err.find("--device-memory: expected a size such as 80GiB"), std::string::npos) << mem.err;
    Proc rate = run(plan_cmd({}, {"--world-size", "2", "--device-memory", "1GiB", "--device-tflops", "-5"}));
    EXPECT_EQ(rate.code, 2) << rate.err;
    EXPECT_NE(rate.err.find("--device-tflops: expected a number > 0, got -5"), std::string::npos) << rate.err;
    // --tp: a divisor of the world, one the model splits over, and pp x tp dividing the world.
    const std::vector<std::pair<std::vector<std::string>, std::string>> tp_bad = {
        {{"--world-size", "2", "--tp", "4"}, "--tp: expected a divisor of --world-size 2, got 4"},
        {{"--world-size", "2", "--tp", "2", "--set", "model.n_head=1"},
         "--tp: the model does not split over 2 ranks: n_head 1 is not a multiple of tp 2"},
        {{"--world-size", "4", "--tp", "2", "--pp", "4"}, "--pp x --tp: expected a divisor of --world-size 4, got 8"}};
    for (const auto& [flags, msg] : tp_bad) {
        auto f = flags;
        f.insert(f.end(), {"--device-memory", "1GiB", "--device-tflops", "1"});
        Proc p = run(plan_cmd({}, f));
        EXPECT_EQ(p.code, 2) << p.err;
        EXPECT_NE(p.err.find(msg), std::string::npos) << p.err;
    }
}

TEST_F(E2E, AutoPlanTrainsAndRefusesWhatCannotFit) {
    // pp 2 on 2 ranks: rank 0's plan is logged and both stages run its lists.
    const std::vector<std::string> sets = {"model.seq_len=64", "training.micro_batch_size=2",
                                           "training.grad_accum_steps=4", "parallel.pp=2", "pipeline.plan=\"auto\"",
                                           "pipeline.plan_memory_gib=1", "run.max_steps=2"};
    Proc p = run(train_cmd(case_dir() / "auto", sets, 2));
    ASSERT_EQ(p.code, 0) << p.err << p.out;
    EXPECT_NE(p.out.find("best: pp 2 x dp 1"), std::string::npos) << p.out;
    const auto [layers, ckpt] = plan_lists(p.out);
    ASSERT_FALSE(layers.empty()) << p.out;
    EXPECT_EQ(summary_lists(p.out), std::make_pair(layers, ckpt)) << p.out;  // every stage runs the plan's lists
    EXPECT_EQ(train_losses(case_dir() / "auto").size(), 2u);
    // 1 MiB fits nothing: exit 2 naming the key and what would fit; nothing written.
    auto tiny_cap = sets;
    tiny_cap.push_back("pipeline.plan_memory_gib=0.001");
    Proc no = run(train_cmd(case_dir() / "nofit", tiny_cap, 2));
    EXPECT_EQ(no.code, 2) << no.err;
    EXPECT_NE(no.err.find("pipeline.plan: \"auto\" found no split"), std::string::npos) << no.err;
    EXPECT_FALSE(fs::exists(case_dir() / "nofit"));
    // A per-stage list beside "auto" is refused by the config check.
    auto listed = sets;
    listed.push_back("pipeline.layers_per_stage=[2, 2]");
    Proc l = run(train_cmd(case_dir() / "listed", listed, 2));
    EXPECT_EQ(l.code, 2) << l.err;
    EXPECT_NE(l.err.find("pipeline.layers_per_stage: expected [] with pipeline.plan = \"auto\""), std::string::npos)
        << l.err;
}

TEST_F(E2E, AutoPlanKeepsTheRunsTp) {
    // pp 2 x tp 2 on 4 ranks: auto plans at the configured tp (it cannot change the run's groups) and
    // says so; every rank runs the lists, and each stage's predicted device bytes (TP rank 0's count)
    // are every rank's peak within 2%.
    const std::vector<std::string> sets = {"model.seq_len=64", "training.micro_batch_size=2",
                                           "training.grad_accum_steps=4", "parallel.pp=2", "parallel.tp=2",
                                           "pipeline.plan=\"auto\"", "pipeline.plan_memory_gib=1", "run.max_steps=2"};
    Proc p = run(train_cmd(case_dir() / "auto_tp", sets, 4));
    ASSERT_EQ(p.code, 0) << p.err << p.out;
    EXPECT_NE(p.out.find("keeps the run's parallel.tp = 2"), std::string::npos) << p.out;
    EXPECT_NE(p.out.find("best: pp 2 x dp 1 x tp 2"), std::string::npos) << p.out;
    const auto [layers, ckpt] = plan_lists(p.out);
    ASSERT_FALSE(layers.empty()) << p.out;
    EXPECT_EQ(summary_lists(p.out), std::make_pair(layers, ckpt)) << p.out;  // every stage runs the plan's lists
    const auto rows = plan_rows(p.out);
    const auto measured = peaks(p.out);
    ASSERT_EQ(rows.size(), 2u) << p.out;
    ASSERT_EQ(measured.size(), 4u) << p.out;
    for (const auto& [rank, mib] : measured)
        EXPECT_NEAR(mib, rows.at(rank / 2)[2], 0.02 * rows.at(rank / 2)[2]) << "rank " << rank << "\n" << p.out;
}

TEST_F(E2E, AutoPlanMoeTrainsAsTheLayoutByHand) {
    // moe-tiny.toml at pp 2 on 4 ranks (ep 2 x dp 2 per stage): rank 0 profiles the MoE layers and
    // plans; every stage runs the plan's lists, and the losses of 3 steps equal, bitwise, a run with
    // the same lists set by hand (same layout, same sums). (ep 1 at pp 2 on 2 ranks, the same code
    // path less the exchange, also passed; left out for the suite's time.)
    for (int ep : {2}) {
        const int ranks = 2 * ep;
        const std::vector<std::string> sets = {"model.seq_len=64", "training.micro_batch_size=2",
                                               "training.grad_accum_steps=4", "parallel.pp=2",
                                               "parallel.ep=" + std::to_string(ep), "run.max_steps=3"};
        auto autos = sets;
        autos.insert(autos.end(), {"pipeline.plan=\"auto\"", "pipeline.plan_memory_gib=1"});
        const fs::path a = case_dir() / ("auto_ep" + std::to_string(ep)), h = case_dir() / ("hand_ep" + std::to_string(ep));
        Proc p = run(train_cmd(a, autos, ranks, "moe-tiny.toml"));
        ASSERT_EQ(p.code, 0) << p.err << p.out;
        EXPECT_NE(p.out.find("best: pp 2 x dp " + std::to_string(ep)), std::string::npos) << p.out;
        const auto [layers, ckpt] = plan_lists(p.out);
        ASSERT_FALSE(layers.empty()) << p.out;
        EXPECT_EQ(summary_lists(p.out), std::make_pair(layers, ckpt)) << p.out;
        auto hand = sets;
        hand.insert(hand.end(), {"pipeline.layers_per_stage=" + layers, "activation_checkpoint.layers_per_stage=" + ckpt});
        Proc q = run(train_cmd(h, hand, ranks, "moe-tiny.toml"));
        ASSERT_EQ(q.code, 0) << q.err << q.out;
        const auto la = train_losses(a), lh = train_losses(h);
        EXPECT_EQ(la.size(), 3u);
        EXPECT_EQ(la, lh) << "ep " << ep;
    }
}

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
