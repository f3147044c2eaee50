// tests/app/test_train_e2e_faults.cpp — the llmtrain binary end to end under faults and at scale
// limits, on the tiny model and dataset (e2e_util.hpp). References:
//  - non-finite steps: the weights and moments of a run stopped before the blow-up, bit for bit;
//  - a hung rank (SIGSTOP): the job ends within parallel.timeout_s + 10 s, its checkpoint resumes;
//  - --dry-run --world-size: the ZeRO paper's 16 bytes of bf16 model states per parameter, 1%;
//  - --dry-run: the checkpoint snapshot's 12 bytes per shard element in host memory when checkpoints
//    are on, none when off (closed form, 1%);
//  - ZeRO-3 resume: an uninterrupted 2-rank ZeRO-3 run, bit for bit;
//  - offload: checkpoints with and without it resume into each other, against a run without, bit
//    for bit; its config errors name the key (exit 2, nothing written);
//  - a rank killed inside the checkpoint writer: the uninterrupted 2-rank job, bit for bit.
#include <hdf5.h>

#include <regex>

#include "data/h5.hpp"
#include "tests/app/e2e_util.hpp"

/// a followed by b.
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

/// True when every element of x is finite.
bool all_finite(const std::vector<float>& x) {
    for (float v : x)
        if (!std::isfinite(v)) return false;
    return true;
}

/// The step_* directories under rd/checkpoints, by step.
std::map<int64_t, fs::path> checkpoint_dirs(const fs::path& rd) {
    std::map<int64_t, fs::path> out;
    for (const auto& e : fs::directory_iterator(rd / "checkpoints")) {
        const std::string n = e.path().filename().string();
        if (n.rfind("step_", 0) == 0) out[std::stoll(n.substr(5))] = e.path();
    }
    return out;
}

TEST_F(E2E, NonFiniteStepsAreSkippedThenTheRunStops) {
    // lr 1e30: step 1's AdamW update (about lr/2 per element in warmup) leaves finite but huge
    // weights, so from step 2 on the forward overflows and the loss or gradient norm is not finite.
    // Reference for "a skipped step changes nothing": the checkpoint of a run that stops at step 1.
    const std::vector<std::string> blowup = {"optimizer.lr=1e30", "lr_schedule.decay=\"constant\"",
                                             "checkpoint.interval=1"};
    const fs::path ref = case_dir() / "one_step", rd = case_dir() / "run";
    Proc p1 = run(llmtrain_args(ref, concat(blowup, {"run.max_steps=1"})));
    ASSERT_EQ(p1.code, 0) << p1.err;
    const fs::path ref1 = ref / "checkpoints" / "step_1";
    ParamLayout L(tiny_gpt());
    const size_t n = L.total_numel();
    std::vector<float> m1(n), v1(n);
    read_optim(ref1.string(), L, 0, n, m1.data(), v1.data());
    const std::vector<float> w1 = params_of(ref1.string());
    ASSERT_TRUE(all_finite(w1) && all_finite(m1) && all_finite(v1));

    Proc p = run(llmtrain_args(rd, concat(blowup, {"run.max_steps=100", "training.max_skipped_steps=3",
                                                   "checkpoint.keep_last=2"})));
    EXPECT_EQ(p.code, 1) << p.err;
    EXPECT_EQ(p.err.rfind("llmtrain: error: stopping at step 4: 3 steps in a row had a non-finite loss or gradient "
                          "norm (training.max_skipped_steps)", 0), 0u) << p.err;
    const std::string log = read_file(rd / "log.txt");
    // The error that ended the run is in log.txt too, as its last line, not only on stderr.
    EXPECT_NE(log.rfind("\nllmtrain: error: stopping at step 4: 3 steps in a row"), std::string::npos) << log;
    for (int s = 2; s <= 4; ++s) {
        const std::string tail = ": not finite, no update (" + std::to_string(s - 1) +
                                 " in a row, limit training.max_skipped_steps = 3)";
        const auto at = log.find("step " + std::to_string(s) + ": loss ");
        ASSERT_NE(at, std::string::npos) << "step " << s << "\n" << log;
        EXPECT_NE(log.substr(at, log.find('\n', at) - at).find(tail), std::string::npos) << log;
    }
    auto losses = train_losses(rd);
    ASSERT_EQ(losses.size(), 4u);
    EXPECT_EQ(losses[1], train_losses(ref)[1]);
    EXPECT_TRUE(std::isfinite(std::stod(losses[1])));
    for (int s = 2; s <= 4; ++s) EXPECT_FALSE(std::isfinite(std::stod(losses[s]))) << "step " << s << ": " << losses[s];

    // The run saved steps 2 and 3 (keep_last 2 pruned step 1): each verifies and holds step 1's
    // weights and moments bit for bit (the skipped steps updated nothing); no step-4 checkpoint.
    auto dirs = checkpoint_dirs(rd);
    ASSERT_EQ(dirs.size(), 2u);
    EXPECT_TRUE(dirs.count(2) && dirs.count(3));
    EXPECT_EQ(read_file(rd / "checkpoints" / "latest"), "step_3\n");
    for (const auto& [step, dir] : dirs) {
        EXPECT_EQ(checkpoint_problem(dir.string()), "") << dir;
        const auto w = params_of(dir.string());
        EXPECT_EQ(std::memcmp(w.data(), w1.data(), n * 4), 0) << dir;
        std::vector<float> m(n), v(n);
        read_optim(dir.string(), L, 0, n, m.data(), v.data());
        EXPECT_EQ(std::memcmp(m.data(), m1.data(), n * 4), 0) << dir;
        EXPECT_EQ(std::memcmp(v.data(), v1.data(), n * 4), 0) << dir;
        EXPECT_EQ(read_train_state(dir.string()).adam_t, 1) << dir;
        EXPECT_EQ(read_train_state(dir.string()).step, step) << dir;
    }

    // A fresh start with a sane lr resumes from step 3. The weights stay non-finite in the forward,
    // so steps 4 and 5 are skipped too, but under the limit (10) the run goes on and ends normally.
    Proc r = run(llmtrain_args(rd, {"run.max_steps=5", "lr_schedule.decay=\"constant\""}));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("resume: from " + (rd / "checkpoints" / "step_3").string() + " at step 3"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("step 5: loss "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(2 in a row, limit training.max_skipped_steps = 10)"), std::string::npos) << r.out;
    const auto w5 = params_of((rd / "checkpoints" / "step_5").string());
    EXPECT_EQ(std::memcmp(w5.data(), w1.data(), n * 4), 0);
}

/// The value of NAME in /proc/<pid>/environ, or "" when it is not set.
std::string env_of(pid_t pid, const std::string& name) {
    const std::string env = read_file(fs::path("/proc") / std::to_string(pid) / "environ");
    std::istringstream ss(env);
    std::string kv;
    while (std::getline(ss, kv, '\0'))
        if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
    return "";
}

/// Ends `pid` if it is still an llmtrain process (SIGCONT first: a stopped process keeps SIGKILL pending).
void kill_leftover(pid_t pid) {
    if (read_file(fs::path("/proc") / std::to_string(pid) / "cmdline").find("llmtrain") == std::string::npos) return;
    kill(pid, SIGCONT);
    kill(pid, SIGKILL);
}

TEST_F(E2E, HungRankEndsTheJobWithinTheTimeout) {
    // Two ranks, a checkpoint every step; rank 1 is stopped (SIGSTOP) after the first checkpoint.
    // Rank 0's next collective must give up after parallel.timeout_s = 3 s with an error naming the
    // operation and the key, and the job must end (MPI_Abort) within 3 + 10 s.
    const double timeout_s = 3;
    const fs::path rd = case_dir() / "dp2";
    auto args = under_mpirun(llmtrain_args(rd, {"run.max_steps=1000000", "run.log_interval=100000",
                                                "run.eval_interval=0", "run.sample_interval=0", "checkpoint.interval=1",
                                                "checkpoint.keep_last=2", "parallel.timeout_s=3"}),
                             2);
    const fs::path out = case_dir() / "mpi.out", err = case_dir() / "mpi.err";
    pid_t mpirun = spawn(args, out, err);
    bool started = false;
    for (int i = 0; i < 600 && !started; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        started = fs::exists(rd / "checkpoints" / "latest");
    }
    auto ranks = children_of(mpirun);
    pid_t rank1 = -1;
    for (pid_t r : ranks)
        if (env_of(r, "OMPI_COMM_WORLD_RANK") == "1") rank1 = r;
    if (!started || rank1 < 0) {
        for (pid_t r : ranks) kill_leftover(r);
        wait_for(mpirun, out, err);
        FAIL() << "no checkpoint or no rank 1 (" << ranks.size() << " ranks)\n" << read_file(err);
    }
    kill(rank1, SIGSTOP);
    const auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    bool ended = false;
    while (!ended && std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(timeout_s + 10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ended = waitpid(mpirun, &status, WNOHANG) == mpirun;
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (pid_t r : ranks) kill_leftover(r);
    if (!ended) {
        kill(mpirun, SIGKILL);
        waitpid(mpirun, &status, 0);
        FAIL() << "the job still ran " << took << " s after rank 1 stopped\n" << read_file(err);
    }
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit 0 after a hung rank";
    const std::string text = read_file(out) + read_file(err);
    const std::regex want("llmtrain: error: (all_reduce_sum|all_reduce_max|reduce_scatter_sum|all_gather|broadcast|"
                          "barrier)[^\n]* on world ranks \\[0,1\\] did not complete within parallel\\.timeout_s = 3 s; "
                          "waiting for world ranks \\[0,1\\]");
    EXPECT_TRUE(std::regex_search(text, want)) << text;

    // The newest checkpoint that `latest` names verifies, and a 2-rank job resumes from it.
    const std::string latest = read_file(rd / "checkpoints" / "latest");
    ASSERT_EQ(latest.rfind("step_", 0), 0u) << latest;
    const fs::path ck = rd / "checkpoints" / latest.substr(0, latest.size() - 1);
    EXPECT_EQ(checkpoint_problem(ck.string()), "");
    const int64_t k = read_train_state(ck.string()).step;
    Proc r = run(under_mpirun(llmtrain_args(rd, {"run.max_steps=" + std::to_string(k + 1), "run.eval_interval=0",
                                                 "run.sample_interval=0"}),
                              2));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("resume: from " + ck.string() + " at step " + std::to_string(k)), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(rd / "checkpoints" / ("step_" + std::to_string(k + 1)) / "state.toml"));
}

TEST_F(E2E, ZeroConfigErrors) {
    // parallel.zero_group_size must divide dp (4 ranks here) and needs a ZeRO stage: exit 2 before
    // anything is written. A ZeRO stage on one rank runs, with a warning.
    const fs::path rd = case_dir() / "run";
    struct Bad {
        std::vector<std::string> sets, want;
    };
    const std::vector<Bad> bad = {
        {{"parallel.zero_stage=2", "parallel.zero_group_size=3"},
         {"llmtrain: error: parallel.zero_group_size: expected 0 or a divisor of dp = 4, got 3"}},
        {{"parallel.zero_stage=0", "parallel.zero_group_size=2"},
         {"llmtrain: error: parallel.zero_group_size: expected 0 with parallel.zero_stage = 0", "got 2"}},
    };
    for (const auto& b : bad) {
        Proc r = run(under_mpirun(llmtrain_args(rd, concat(b.sets, {"run.max_steps=2"})), 4));
        EXPECT_EQ(r.code, 2) << b.sets[1] << "\n" << r.err;
        for (const auto& w : b.want) EXPECT_NE(r.err.find(w), std::string::npos) << w << "\n" << r.err;
        EXPECT_FALSE(fs::exists(rd)) << b.sets[1];
    }
    Proc one = run(llmtrain_args(rd, {"parallel.zero_stage=2", "run.max_steps=2"}));
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_NE(one.err.find("llmtrain: warning: parallel.zero_stage = 2 over a ZeRO group of one rank shards nothing"),
              std::string::npos) << one.err;
    EXPECT_EQ(train_losses(rd).size(), 2u);
}

/// The per-stage rows of a `--dry-run --world-size N` report: stage -> its numbers in MiB (the
/// memory categories, the device total, then after '|' the model states and the paper's formula).
std::map<int, std::vector<double>> dry_run_rows(const std::string& out) {
    std::map<int, std::vector<double>> rows;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream ls(line);
        int stage = -1;
        if (!(ls >> stage) || line.find('|') == std::string::npos) continue;
        std::vector<double> row;
        std::string tok;
        while (ls >> tok)
            if (tok != "|") row.push_back(std::stod(tok));
        EXPECT_FALSE(rows.count(stage)) << "two rows for stage " << stage;
        rows[stage] = row;
    }
    return rows;
}
constexpr size_t kHostColumn = 6, kStatesColumn = 8;  // MemCategory::host; after the device total

TEST_F(E2E, DryRunWorldSize) {
    // The shipped 1.5B config at 64 ranks, estimated without allocating and without its data files.
    // Reference: Rajbhandari et al. 2020, bf16 mixed precision keeps 2 + 2 + 12 = 16 bytes of model
    // states per parameter; ZeRO-3 splits all of them over the 64 ranks (stage 0 splits nothing).
    // Psi from the closed form with wte padded to Vp = 50304 rows; within 1% (unit padding).
    const fs::path config = fs::path(__FILE__).parent_path().parent_path().parent_path() / "configs" / "gpt2-1.5b.toml";
    ASSERT_TRUE(fs::exists(config)) << config;
    const fs::path here = fs::current_path();
    fs::current_path(case_dir());  // the config's relative data paths point at nothing here
    ASSERT_FALSE(fs::exists("data/fineweb/train.h5"));
    Proc p = run({LLMTRAIN_BIN, "--config", config.string(), "--dry-run", "--world-size", "64"});
    Proc bad = run({LLMTRAIN_BIN, "--config", config.string(), "--world-size", "64"});
    fs::current_path(here);
    ASSERT_EQ(p.code, 0) << p.err;
    EXPECT_FALSE(fs::exists(case_dir() / "runs"));

    const double Vp = 50304, C = 1600, T = 1024, Lyr = 48;
    const double psi = Vp * C + T * C + Lyr * (12 * C * C + 13 * C) + 2 * C;
    std::map<int, double> states;  // stage -> "model states" column (MiB)
    for (const auto& [stage, row] : dry_run_rows(p.out)) states[stage] = row[kStatesColumn];
    ASSERT_EQ(states.size(), 4u) << p.out;
    for (int s = 0; s <= 3; ++s) EXPECT_TRUE(states.count(s)) << "no row for stage " << s << "\n" << p.out;
    const double mib = 1024.0 * 1024.0;
    EXPECT_NEAR(states[3], 16 * psi / 64 / mib, 0.01 * 16 * psi / 64 / mib) << p.out;
    EXPECT_NEAR(states[0], 16 * psi / mib, 0.01 * 16 * psi / mib) << p.out;

    EXPECT_EQ(bad.code, 2) << bad.err;
    EXPECT_NE(bad.err.find("--world-size requires --dry-run"), std::string::npos) << bad.err;
}

TEST_F(E2E, PipelineLayoutErrorsNameTheKey) {
    // 3 ranks cannot form 2 stages; ZeRO-2 does not combine with a pipeline: exit 2, the key named,
    // nothing written. 4 ranks at pp 2 are dp 2: the global batch counts dp, not the world.
    const fs::path d = case_dir() / "bad";
    Proc odd = run(under_mpirun(llmtrain_args(d, {"parallel.pp=2"}), 3));
    EXPECT_EQ(odd.code, 2) << odd.err;
    EXPECT_NE(odd.err.find("parallel.pp: expected a divisor of the number of ranks (3)"), std::string::npos) << odd.err;
    Proc z2 = run(llmtrain_args(d, {"parallel.pp=2", "parallel.zero_stage=2"}));
    EXPECT_EQ(z2.code, 2) << z2.err;
    EXPECT_NE(z2.err.find("parallel.zero_stage"), std::string::npos) << z2.err;
    EXPECT_FALSE(fs::exists(d / "checkpoints"));
    const fs::path config = fs::path(__FILE__).parent_path().parent_path().parent_path() / "configs" / "gpt2-1.5b.toml";
    Proc dry = run({LLMTRAIN_BIN, "--config", config.string(), "--dry-run", "--world-size", "3", "--set", "parallel.pp=2"});
    EXPECT_EQ(dry.code, 2) << dry.err;
    EXPECT_NE(dry.err.find("parallel.pp: expected a divisor of --world-size 3"), std::string::npos) << dry.err;
    const fs::path ok = case_dir() / "pp2dp2";
    Proc p = run(under_mpirun(llmtrain_args(ok, {"parallel.pp=2", "run.max_steps=1", "training.grad_accum_steps=2"}), 4));
    ASSERT_EQ(p.code, 0) << p.err;
    EXPECT_NE(p.out.find("x dp 2 = global_batch_size"), std::string::npos) << p.out;
}

TEST_F(E2E, DryRunWithOffload) {
    // GPT-2 1.5B on 8 ranks with the optimizer offloaded (Ren et al. 2021): the device keeps the bf16
    // params and grads, 4 bytes per parameter at stage 0; the host holds the fp32 master weights, m
    // and v of the rank's shard, 12 Psi / 8 at stages 1-3 (12 Psi at stage 0), plus 4 staging buffers
    // of 8 MiB (16 MiB chunks of fp32, bf16 copies), plus the checkpoint snapshot (interval 1000:
    // on) of the same 12 bytes per shard element. Within 1% (unit padding).
    const fs::path config = fs::path(__FILE__).parent_path().parent_path().parent_path() / "configs" / "gpt2-1.5b.toml";
    Proc p = run({LLMTRAIN_BIN, "--config", config.string(), "--dry-run", "--world-size", "8", "--set",
                  "optimizer.offload=\"cpu\""});
    ASSERT_EQ(p.code, 0) << p.err;
    const double Vp = 50304, C = 1600, T = 1024, Lyr = 48, mib = 1024.0 * 1024.0;
    const double psi = Vp * C + T * C + Lyr * (12 * C * C + 13 * C) + 2 * C;
    auto rows = dry_run_rows(p.out);
    ASSERT_EQ(rows.size(), 4u) << p.out;
    EXPECT_NEAR(rows[0][kStatesColumn], 4 * psi / mib, 0.01 * 4 * psi / mib) << p.out;
    EXPECT_NEAR(rows[0][kHostColumn], 2 * 12 * psi / mib + 32, 0.01 * 24 * psi / mib) << p.out;
    for (int stage = 1; stage <= 3; ++stage)
        EXPECT_NEAR(rows[stage][kHostColumn], 2 * 12 * psi / 8 / mib + 32, 0.01 * 24 * psi / 8 / mib) << p.out;
}

/// The "<what> X MiB" figure in text (the first after `after`), or -1 when absent.
double mib_after(const std::string& text, const std::string& what, const std::string& after = "") {
    const size_t from = text.find(after);
    std::smatch m;
    const std::string tail = from == std::string::npos ? "" : text.substr(from);
    return std::regex_search(tail, m, std::regex(what + " ([0-9.]+) MiB")) ? std::stod(m[1]) : -1.0;
}

TEST_F(E2E, DryRunCountsTheCheckpointSnapshotOnlyWhenCheckpointsAreOn) {
    // The checkpoint snapshot is pinned host memory of 3 x 4 bytes (w, m, v) per element of the
    // rank's optimizer shard (CheckpointSaver::reserve), taken at start only when checkpoints can be
    // written (checkpoint.interval > 0 or checkpoint.at_end). GPT-2 1.5B on 8 ranks (interval 1000):
    // 12 Psi at ZeRO stage 0 (the counted rank holds the whole optimizer state), 12 Psi / 8 at stages
    // 1-3, within 1% (unit padding); off (interval 0, at_end false): 0.0 at every stage. Then a real
    // start (--dry-run alone builds the Trainer, CPU backend, tiny model): the summary's host memory
    // and its snapshot line are 12 n bytes (n: the closed-form parameter count) when on (interval 0,
    // at_end true: the end-of-run checkpoint needs it), and 0.0 MiB with "checkpoints: off" when off.
    const fs::path config = fs::path(__FILE__).parent_path().parent_path().parent_path() / "configs" / "gpt2-1.5b.toml";
    const auto dry = [&](std::vector<std::string> sets) {
        std::vector<std::string> a = {LLMTRAIN_BIN, "--config", config.string(), "--dry-run", "--world-size", "8"};
        for (const auto& x : sets) a.insert(a.end(), {"--set", x});
        return run(a);
    };
    Proc on = dry({}), off = dry({"checkpoint.interval=0", "checkpoint.at_end=false"});
    ASSERT_EQ(on.code, 0) << on.err;
    ASSERT_EQ(off.code, 0) << off.err;
    const double Vp = 50304, C = 1600, T = 1024, Lyr = 48, mib = 1024.0 * 1024.0;
    const double psi = Vp * C + T * C + Lyr * (12 * C * C + 13 * C) + 2 * C;
    auto rows_on = dry_run_rows(on.out), rows_off = dry_run_rows(off.out);
    ASSERT_EQ(rows_on.size(), 4u) << on.out;
    ASSERT_EQ(rows_off.size(), 4u) << off.out;
    for (int stage = 0; stage <= 3; ++stage) {
        const double want = 12 * psi / (stage == 0 ? 1 : 8) / mib;
        EXPECT_NEAR(rows_on[stage][kHostColumn], want, 0.01 * want) << "stage " << stage << "\n" << on.out;
        EXPECT_EQ(rows_off[stage][kHostColumn], 0.0) << "stage " << stage << "\n" << off.out;
        EXPECT_EQ(rows_on[stage][kStatesColumn], rows_off[stage][kStatesColumn]) << "stage " << stage;  // device alike
    }

    const long long V = (tiny_vocab() + 127) / 128 * 128, c = 32, t = 16, l = 2;
    const double n = double(V * c + t * c + l * (12 * c * c + 13 * c) + 2 * c), want = 12 * n / mib;
    const auto start = [&](const std::string& name, std::vector<std::string> sets) {
        auto a = llmtrain_args(case_dir() / name, sets);
        a.push_back("--dry-run");
        return run(a);
    };
    Proc real_on = start("on", {}), real_off = start("off", {"checkpoint.at_end=false"});
    ASSERT_EQ(real_on.code, 0) << real_on.err;
    ASSERT_EQ(real_off.code, 0) << real_off.err;
    // Printed to 0.1 MiB: 0.05 of rounding plus 1% of padding.
    EXPECT_NEAR(mib_after(real_on.out, "host", "memory (this rank)"), want, 0.05 + 0.01 * want) << real_on.out;
    EXPECT_NEAR(mib_after(real_on.out, "host snapshot"), want, 0.05 + 0.01 * want) << real_on.out;
    EXPECT_NE(real_on.out.find("checkpoints: at the end and on SIGTERM/SIGINT"), std::string::npos) << real_on.out;
    EXPECT_EQ(mib_after(real_off.out, "host", "memory (this rank)"), 0.0) << real_off.out;
    EXPECT_NE(real_off.out.find("checkpoints: off (checkpoint.interval = 0, checkpoint.at_end = false)"),
              std::string::npos) << real_off.out;
    EXPECT_GT(want, 0.3);  // the check above can tell 0.0 from the snapshot at this size
    // Off, a run writes no checkpoint at its end either (on, the same run writes step_2).
    Proc ran_off = run(llmtrain_args(case_dir() / "ran_off", {"run.max_steps=2", "checkpoint.at_end=false"}));
    Proc ran_on = run(llmtrain_args(case_dir() / "ran_on", {"run.max_steps=2"}));
    ASSERT_EQ(ran_off.code, 0) << ran_off.err;
    ASSERT_EQ(ran_on.code, 0) << ran_on.err;
    EXPECT_FALSE(fs::exists(case_dir() / "ran_off" / "checkpoints" / "step_2"));
    EXPECT_TRUE(fs::exists(case_dir() / "ran_on" / "checkpoints" / "step_2"));
}

TEST_F(E2E, ZeroStage3ResumeIsBitwiseExact) {
    // As ResumeIsBitwiseExact, with 2 ranks at ZeRO stage 3: each rank checkpoints its shard, the
    // resumed job reassembles them, and its losses and weights match the uninterrupted job bit for bit.
    const std::vector<std::string> common = {"lr_schedule.decay=\"constant\"", "training.grad_accum_steps=2",
                                             "parallel.zero_stage=3"};
    const fs::path a = case_dir() / "straight", b = case_dir() / "resumed";
    Proc pa = run(under_mpirun(llmtrain_args(a, concat(common, {"run.max_steps=8"})), 2));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb1 = run(under_mpirun(llmtrain_args(b, concat(common, {"run.max_steps=4"})), 2));
    ASSERT_EQ(pb1.code, 0) << pb1.err;
    Proc pb2 = run(under_mpirun(llmtrain_args(b, concat(common, {"run.max_steps=8"})), 2));
    ASSERT_EQ(pb2.code, 0) << pb2.err;
    EXPECT_NE(pb2.out.find("resume: from " + (b / "checkpoints" / "step_4").string()), std::string::npos) << pb2.out;
    EXPECT_NE(read_file(b / "log.txt").find("parallel: zero_stage 3"), std::string::npos);

    expect_resume_is_exact(a, b, pa.out, pb2.out);
}

TEST_F(E2E, OffloadCheckpointsResumeEitherWay) {
    // A checkpoint written with the optimizer offloaded resumes without offload, and the other way
    // round (at another fraction): both equal the uninterrupted run without offload bit for bit,
    // since the host step is the device step's arithmetic (docs/parallelism.md "Optimizer offload").
    const std::vector<std::string> common = {"lr_schedule.decay=\"constant\"", "training.grad_accum_steps=2"};
    const std::vector<std::string> off = {"optimizer.offload=\"cpu\"", "optimizer.offload_chunk_mb=0.01"};
    const fs::path a = case_dir() / "straight", b = case_dir() / "off_then_on", c = case_dir() / "on_then_off";
    Proc pa = run(llmtrain_args(a, concat(common, {"run.max_steps=8"})));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb1 = run(llmtrain_args(b, concat(concat(common, off), {"run.max_steps=4"})));
    ASSERT_EQ(pb1.code, 0) << pb1.err;
    EXPECT_NE(pb1.out.find("optimizer: offload cpu"), std::string::npos) << pb1.out;
    Proc pb2 = run(llmtrain_args(b, concat(common, {"run.max_steps=8"})));
    ASSERT_EQ(pb2.code, 0) << pb2.err;
    expect_resume_is_exact(a, b, pa.out, pb2.out);
    Proc pc1 = run(llmtrain_args(c, concat(common, {"run.max_steps=4"})));
    ASSERT_EQ(pc1.code, 0) << pc1.err;
    Proc pc2 = run(llmtrain_args(c, concat(concat(common, off), {"run.max_steps=8", "optimizer.offload_fraction=0.5"})));
    ASSERT_EQ(pc2.code, 0) << pc2.err;
    expect_resume_is_exact(a, c, pa.out, pc2.out);
}

TEST_F(E2E, OffloadConfigErrorsNameTheKey) {
    for (const std::string& bad : {std::string("optimizer.offload_fraction=1.5"), std::string("optimizer.offload_fraction=0"),
                                   std::string("optimizer.offload=\"gpu\""), std::string("optimizer.offload_chunk_mb=0")}) {
        const fs::path d = case_dir() / "bad";
        Proc p = run(llmtrain_args(d, {bad}));
        EXPECT_EQ(p.code, 2) << bad << ": " << p.err;
        EXPECT_NE(p.err.find(bad.substr(0, bad.find('='))), std::string::npos) << p.err;
        EXPECT_FALSE(fs::exists(d / "checkpoints")) << bad;
    }
}

int main(int argc, char** argv) { return e2e_main(argc, argv); }

/// The offset of `needle` in text, or npos; for ordering log lines.
size_t at(const std::string& text, const std::string& needle) { return text.find(needle); }

// Asynchronous checkpoints (docs/checkpoints.md "Asynchronous checkpoints"), checked by the order of
// the log's lines rather than by timings: with every writer slowed by an injected delay (1.5 s,
// a step here takes milliseconds) training goes on while step 3's checkpoint is written (steps 4
// and 5 are logged before it is saved; a synchronous write saves it before step 4), the training
// thread is held up far less than the delay, the next checkpoint starts only after the previous
// one is saved (never two in flight), and the result is bitwise the synchronous run's (losses,
// model.h5, optim_0.h5). A writer that fails in the background (its temporary directory removed
// under it) stops the run with exit 1 and keeps the last committed checkpoint.
TEST_F(E2E, AsyncCheckpointsGoOnTrainingAndNeverOverlap) {
    const std::vector<std::string> common = {"run.max_steps=9", "checkpoint.interval=3", "run.eval_interval=0",
                                             "run.sample_interval=0", "checkpoint.keep_last=0"};
    const fs::path ref = case_dir() / "sync", rd = case_dir() / "async", bad = case_dir() / "fails";
    Proc ps = run(llmtrain_args(ref, concat(common, {"checkpoint.async=false"})));
    ASSERT_EQ(ps.code, 0) << ps.err;
    EXPECT_LT(at(ps.out, "checkpoint: saved " + (ref / "checkpoints" / "step_3").string()), at(ps.out, "step 4/9"));

    setenv("LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS", "1500", 1);
    Proc pa = run(llmtrain_args(rd, common));  // checkpoint.async = true is the default
    ASSERT_EQ(pa.code, 0) << pa.err;
    const std::string& log = pa.out;
    for (int s : {3, 6, 9}) {
        const std::string name = "step_" + std::to_string(s);
        const size_t snap = at(log, "checkpoint: step " + std::to_string(s) + " in host memory");
        const size_t saved = at(log, "checkpoint: saved " + (rd / "checkpoints" / name).string());
        ASSERT_NE(snap, std::string::npos) << log;
        ASSERT_NE(saved, std::string::npos) << log;
        EXPECT_LT(snap, saved) << log;
        if (s < 9) {  // training went on while the writer slept; the next checkpoint waited for this one
            EXPECT_LT(at(log, "step " + std::to_string(s + 2) + "/9"), saved) << log;
            EXPECT_LT(saved, at(log, "checkpoint: step " + std::to_string(s + 3) + " in host memory")) << log;
        }
        // "training blocked X s" of the snapshot: far below the 1.5 s the writer slept.
        const double blocked = std::stod(log.substr(log.find("training blocked ", snap) + 17));
        EXPECT_LT(blocked, 0.75) << log;
        EXPECT_EQ(read_file(rd / "checkpoints" / name / "model.h5"), read_file(ref / "checkpoints" / name / "model.h5"));
        EXPECT_EQ(read_file(rd / "checkpoints" / name / "optim_0.h5"),
                  read_file(ref / "checkpoints" / name / "optim_0.h5"));
        EXPECT_EQ(checkpoint_problem((rd / "checkpoints" / name).string()), "") << name;
    }
    EXPECT_EQ(train_losses(rd), train_losses(ref));

    // A background write that fails: .tmp_step_6 removed while its writer sleeps.
    setenv("LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS", "3000", 1);
    const fs::path out = case_dir() / "fails.out", err = case_dir() / "fails.err";
    const pid_t pid = spawn(llmtrain_args(bad, common), out, err);
    unsetenv("LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS");
    const fs::path tmp6 = bad / "checkpoints" / ".tmp_step_6";
    bool removed = false;
    for (int i = 0; i < 6000 && !removed; ++i) {  // up to 60 s
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::error_code ec;
        removed = fs::remove_all(tmp6, ec) > 0;
    }
    Proc pf = wait_for(pid, out, err);
    ASSERT_TRUE(removed) << pf.out;
    EXPECT_EQ(pf.code, 1) << pf.err;
    EXPECT_NE(pf.err.find("llmtrain: error: checkpoint step_6 failed: "), std::string::npos) << pf.err;
    EXPECT_NE(pf.err.find("(the last committed checkpoint is kept)"), std::string::npos) << pf.err;
    EXPECT_EQ(read_file(bad / "checkpoints" / "latest"), "step_3\n");
    EXPECT_EQ(checkpoint_problem((bad / "checkpoints" / "step_3").string()), "");
    EXPECT_FALSE(fs::exists(bad / "checkpoints" / "step_6"));
}

/// The datasets in group `group` of the HDF5 file `path` (-1 when it cannot be read).
long long datasets_in(const fs::path& path, const char* group) {
    h5::Lock lock;  // every HDF5 call of the process (data/h5.hpp)
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    const hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    H5G_info_t info{};
    const bool ok = g >= 0 && H5Gget_info(g, &info) >= 0;
    if (g >= 0) H5Gclose(g);
    H5Fclose(f);
    return ok ? (long long)info.nlinks : -1;
}

// Rank 1 of a 2-rank ZeRO-1 job (two parts: each rank writes optim_<k>.h5 and its slices of model.h5) dies
// by SIGKILL in the middle of writing its part of the asynchronous checkpoint of step 4, while
// rank 0 trains on. The job must exit non-zero, commit nothing (`latest` still names step_2, no
// newer step_N verifies), and a rerun must resume from step_2 and match the uninterrupted job bit
// for bit (losses, step_8's weights, the sample). The kill is the existing crash hook
// (LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP), given to rank 1 alone through an MPMD launch. Its count is
// rank 1's crash points (checkpoint.hpp): per checkpoint 2 around the snapshot, then for
// optim_1.h5 one at the create, one per dataset, one at the flush and one at the fsync, and for its
// slices of model.h5 one per slice and one at the fsync; it holds the pieces of n tensors
// (optim_1.h5: n under /m and n under /v; n slices of model.h5), n read from the reference job's
// optim_1.h5. So the second checkpoint's writer runs from op per + 3 to 2 per.
TEST_F(E2E, RankKilledInsideTheWriterCommitsNothing) {
    const std::vector<std::string> common = {"parallel.zero_stage=1", "run.max_steps=8", "checkpoint.interval=2",
                                             "checkpoint.keep_last=0", "lr_schedule.decay=\"constant\"",
                                             "parallel.timeout_s=10"};
    const fs::path ref = case_dir() / "straight", rd = case_dir() / "killed";
    Proc pr = run(under_mpirun(llmtrain_args(ref, common), 2));
    ASSERT_EQ(pr.code, 0) << pr.err;
    const long long n = datasets_in(ref / "checkpoints" / "step_2" / "optim_1.h5", "m");
    ASSERT_GT(n, 0);
    ASSERT_EQ(datasets_in(ref / "checkpoints" / "step_2" / "optim_1.h5", "v"), n);
    const long long per = 2 + (3 + 2 * n) + (n + 1), k = per + 2 + (per - 2) / 2;

    // The job in which rank 1 dies at op k (step_2 is committed before).
    std::vector<std::string> rank0 = llmtrain_args(rd, common), rank1 = rank0;
    rank1.insert(rank1.begin(), {"env", "LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP=" + std::to_string(k)});
    std::vector<std::string> mpmd = {MPIEXEC, "--oversubscribe", "-np", "1"};
    mpmd.insert(mpmd.end(), rank0.begin(), rank0.end());
    mpmd.insert(mpmd.end(), {":", "-np", "1"});
    mpmd.insert(mpmd.end(), rank1.begin(), rank1.end());
    const auto t0 = std::chrono::steady_clock::now();
    Proc pk = run(mpmd);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(pk.code, 0) << pk.out << pk.err;
    EXPECT_LT(took, 60) << "the job outlived its killed rank";
    const std::string text = pk.out + pk.err;
    EXPECT_TRUE(std::regex_search(text, std::regex("rank 1[^\n]*(signal 9|Killed)"))) << text;
    EXPECT_NE(text.find("checkpoint: step 4 in host memory"), std::string::npos) << text;  // it began
    EXPECT_EQ(read_file(rd / "checkpoints" / "latest"), "step_2\n");
    EXPECT_EQ(checkpoint_problem((rd / "checkpoints" / "step_2").string()), "");
    for (const auto& [step, dir] : checkpoint_dirs(rd))
        if (step > 2) {
            EXPECT_NE(checkpoint_problem(dir.string()), "") << dir << " counts as complete";
        }

    Proc pc = run(under_mpirun(llmtrain_args(rd, common), 2));
    ASSERT_EQ(pc.code, 0) << pc.err;
    EXPECT_NE(pc.out.find("resume: from " + (rd / "checkpoints" / "step_2").string() + " at step 2"), std::string::npos)
        << pc.out;
    expect_resume_is_exact(ref, rd, pr.out, pc.out);
}
