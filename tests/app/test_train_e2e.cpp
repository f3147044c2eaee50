// tests/app/test_train_e2e.cpp — the llmtrain binary end to end on a tiny GPT-2 (2 layers, width 32,
// seq_len 16) and the tiny dataset of make_tiny_dataset (ctest fixture).
//
// Each case runs llmtrain as a child process and checks its exit code, stderr, run directory and
// the per-step losses in losses.tsv (%.9g: exact fp32). References:
//  - exact resume: the losses and final tensors of an uninterrupted run, compared bit for bit;
//  - gradient accumulation: one micro-batch of 2B on the same windows, 1e-5 relative;
//  - data parallel (mpirun -np 2): the same step computed here in one process from the library
//    pieces over the two ranks' windows (the loader's sharding rule), 1e-5 relative;
//  - errors: exit code, a message naming the file/key, and an untouched run directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "app/checkpoint.hpp"
#include "app/config.hpp"
#include "data/loader.hpp"
#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;

namespace {

const std::string kData = TINY_DATA_DIR;

int tiny_vocab() {
    std::ifstream f(kData + "/vocab_size.txt");
    int v = 0;
    f >> v;
    return v;
}

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

struct Proc {
    int code = -1;
    std::string out, err;
};

/// Starts argv[0] (searched in PATH) with stdout/stderr into files; returns the pid.
pid_t spawn(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err) {
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        std::vector<char*> a;
        for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
        a.push_back(nullptr);
        execvp(a[0], a.data());
        _exit(127);
    }
    return pid;
}

Proc wait_for(pid_t pid, const fs::path& out, const fs::path& err) {
    int status = 0;
    waitpid(pid, &status, 0);
    Proc p;
    p.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    p.out = read_file(out);
    p.err = read_file(err);
    return p;
}

/// The test's scratch directory (fresh for each case).
fs::path case_dir() {
    const fs::path d = fs::path(RUNS_DIR) / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    return d;
}

Proc run(const std::vector<std::string>& argv) {
    static int n = 0;
    const fs::path base = case_dir() / ("proc" + std::to_string(n++));
    return wait_for(spawn(argv, base.string() + ".out", base.string() + ".err"), base.string() + ".out",
                    base.string() + ".err");
}

/// llmtrain with the tiny model and data, run dir `rd`, plus extra --set overrides.
std::vector<std::string> llmtrain_args(const fs::path& rd, const std::vector<std::string>& sets) {
    std::vector<std::string> a = {LLMTRAIN_BIN};
    const std::vector<std::string> base = {
        "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.seq_len=16",
        "model.vocab_size=" + std::to_string(tiny_vocab()), "data.train=\"" + kData + "/train.h5\"",
        "data.val=\"" + kData + "/val.h5\"", "run.run_dir=\"" + rd.string() + "\"", "run.backend=\"cpu\"",
        "metrics.enabled=false", "training.micro_batch_size=2", "run.log_interval=1", "run.eval_interval=3",
        "run.eval_steps=2", "run.sample_interval=3", "run.sample_tokens=6", "lr_schedule.warmup_steps=2",
        "optimizer.lr=0.01", "lr_schedule.min_lr=0.001", "checkpoint.interval=0"};
    for (const auto& s : base) a.insert(a.end(), {"--set", s});
    for (const auto& s : sets) a.insert(a.end(), {"--set", s});
    return a;
}

/// Train losses of losses.tsv as written (%.9g text), step -> loss; a later line for a step wins.
std::map<int64_t, std::string> train_losses(const fs::path& rd) {
    std::ifstream f(rd / "losses.tsv");
    std::map<int64_t, std::string> out;
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string step, kind, loss;
        std::getline(ls, step, '\t');
        std::getline(ls, kind, '\t');
        std::getline(ls, loss, '\t');
        if (kind == "train") out[std::stoll(step)] = loss;
    }
    return out;
}

/// Every file under dir with its contents (to prove nothing changed).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file()) out[e.path().string()] = read_file(e.path());
    return out;
}

GPTConfig tiny_gpt() {
    GPTConfig c;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 32;
    c.seq_len = 16;
    c.vocab_size = tiny_vocab();
    return c;
}

std::vector<float> params_of(const std::string& ckpt) {
    ParamLayout L(tiny_gpt());
    std::vector<float> p(L.total_numel());
    read_params(ckpt, L, p.data());
    return p;
}

/// Parameters of two runs that differ only in summation order: every element within 1e-5 + 1e-5|y|,
/// except the key bias (the middle third of attn.c_attn.bias). Its exact gradient is zero (softmax
/// ignores a constant added to every key), so its gradient is rounding noise that AdamW turns into
/// steps of up to ~lr each: there the bound is lr * steps.
void expect_params_close(const std::vector<float>& x, const std::vector<float>& y, double lr, int steps) {
    ParamLayout L(tiny_gpt());
    const size_t C = 32;
    for (const auto& t : L.tensors()) {
        const bool qkv_bias = t.name.size() > 16 && t.name.substr(t.name.size() - 16) == "attn.c_attn.bias";
        for (size_t i = 0; i < t.numel; ++i) {
            const size_t k = t.offset + i;
            const double tol = qkv_bias && i >= C && i < 2 * C ? lr * steps : 1e-5 + 1e-5 * std::fabs(y[k]);
            ASSERT_NEAR(x[k], y[k], tol) << t.name << "[" << i << "]";
        }
    }
}

struct E2E : ::testing::Test {
    void SetUp() override {
        fs::remove_all(case_dir());
        fs::create_directories(case_dir());
        ASSERT_GT(tiny_vocab(), 0) << "tiny dataset missing: run the app_make_tiny_dataset fixture";
    }
};

}  // namespace

TEST_F(E2E, ResumeIsBitwiseExact) {
    // Constant lr after warmup, so that max_steps (the decay length) may differ between the parts.
    const std::vector<std::string> common = {"lr_schedule.decay=\"constant\"", "training.grad_accum_steps=2"};
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.end(), common.begin(), common.end());
        return v;
    };
    const fs::path a = case_dir() / "straight", b = case_dir() / "resumed";
    Proc pa = run(llmtrain_args(a, with({"run.max_steps=8"})));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb1 = run(llmtrain_args(b, with({"run.max_steps=4"})));
    ASSERT_EQ(pb1.code, 0) << pb1.err;
    Proc pb2 = run(llmtrain_args(b, with({"run.max_steps=8"})));
    ASSERT_EQ(pb2.code, 0) << pb2.err;
    EXPECT_NE(pb2.out.find("resume: from " + (b / "checkpoints" / "step_4").string()), std::string::npos) << pb2.out;

    auto la = train_losses(a), lb = train_losses(b);
    ASSERT_EQ(la.size(), 8u);
    ASSERT_EQ(lb.size(), 8u);
    for (int s = 1; s <= 8; ++s) EXPECT_EQ(la[s], lb[s]) << "step " << s;
    EXPECT_NE(la[1], la[8]);  // it trains
    // Final tensors are bitwise equal too.
    auto pa8 = params_of((a / "checkpoints" / "step_8").string()), pb8 = params_of((b / "checkpoints" / "step_8").string());
    ASSERT_EQ(pa8.size(), pb8.size());
    EXPECT_EQ(std::memcmp(pa8.data(), pb8.data(), pa8.size() * 4), 0);
    // The sample at step 6 (sampler RNG restored from the checkpoint) is the same text.
    auto sample6 = [](const std::string& out) {
        auto at = out.find("sample at step 6:");
        return at == std::string::npos ? std::string("<none>") : out.substr(at, out.find('\n', at) - at);
    };
    EXPECT_EQ(sample6(pa.out), sample6(pb2.out));
    EXPECT_NE(sample6(pa.out), "<none>");
    // log.txt of the resumed run holds both parts (appended, never truncated).
    const std::string log = read_file(b / "log.txt");
    EXPECT_NE(log.find("step 4/4"), std::string::npos);
    EXPECT_NE(log.find("step 8/8"), std::string::npos);
}

TEST_F(E2E, SigtermSavesThenResumeContinues) {
    const fs::path rd = case_dir() / "run";
    const fs::path out = case_dir() / "long.out", err = case_dir() / "long.err";
    pid_t pid = spawn(llmtrain_args(rd, {"run.max_steps=1000000", "run.log_interval=100000", "run.eval_interval=0",
                                    "run.sample_interval=0"}),
                      out, err);
    // Wait (up to 60 s) until a few steps are done, then ask it to stop.
    bool started = false;
    for (int i = 0; i < 600 && !started; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        started = fs::exists(rd / "losses.tsv") && train_losses(rd).size() >= 3;
    }
    ASSERT_TRUE(started) << read_file(err);
    kill(pid, SIGTERM);
    Proc p = wait_for(pid, out, err);
    ASSERT_EQ(p.code, 0) << p.err;
    auto losses = train_losses(rd);
    const int64_t k = losses.rbegin()->first;
    EXPECT_NE(p.out.find("stopping after step " + std::to_string(k) + " on SIGTERM"), std::string::npos) << p.out;
    const fs::path ck = rd / "checkpoints" / ("step_" + std::to_string(k));
    EXPECT_TRUE(fs::exists(ck / "state.toml"));
    EXPECT_EQ(read_file(rd / "checkpoints" / "latest"), "step_" + std::to_string(k) + "\n");
    EXPECT_EQ(read_train_state(ck.string()).step, k);

    Proc r = run(llmtrain_args(rd, {"run.max_steps=" + std::to_string(k + 2), "run.eval_interval=0", "run.sample_interval=0"}));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("resume: from " + ck.string()), std::string::npos) << r.out;
    auto after = train_losses(rd);
    EXPECT_EQ(after.rbegin()->first, k + 2);
    EXPECT_TRUE(after.count(k + 1));
}

TEST_F(E2E, HalfWrittenCheckpointsAreIgnored) {
    const fs::path rd = case_dir() / "run", ck = rd / "checkpoints";
    Proc p = run(llmtrain_args(rd, {"run.max_steps=4", "checkpoint.interval=2", "lr_schedule.decay=\"constant\""}));
    ASSERT_EQ(p.code, 0) << p.err;
    ASSERT_TRUE(fs::exists(ck / "step_2" / "state.toml"));
    // A crash while writing step 6 (temporary dir with a cut-off model.h5) and a step_8 without
    // its state file (which is written last).
    fs::copy(ck / "step_4", ck / ".tmp_step_6", fs::copy_options::recursive);
    fs::resize_file(ck / ".tmp_step_6" / "model.h5", 100);
    fs::remove(ck / ".tmp_step_6" / "state.toml");
    fs::copy(ck / "step_4", ck / "step_8", fs::copy_options::recursive);
    fs::remove(ck / "step_8" / "state.toml");
    Proc r = run(llmtrain_args(rd, {"run.max_steps=6", "checkpoint.interval=2", "lr_schedule.decay=\"constant\""}));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("resume: from " + (ck / "step_4").string()), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(ck / "step_6" / "state.toml"));
    EXPECT_FALSE(fs::exists(ck / ".tmp_step_6"));
    EXPECT_EQ(train_losses(rd).rbegin()->first, 6);
    // An explicit path to the incomplete one is refused with a clear message.
    Proc bad = run(llmtrain_args(rd, {"run.max_steps=10", "checkpoint.resume=\"" + (ck / "step_8").string() + "\""}));
    EXPECT_EQ(bad.code, 1);
    EXPECT_NE(bad.err.find("not a complete checkpoint"), std::string::npos) << bad.err;
}

TEST_F(E2E, ResumeIntoAnotherShapeFailsAndKeepsEverything) {
    const fs::path rd = case_dir() / "run";
    Proc p = run(llmtrain_args(rd, {"run.max_steps=2"}));
    ASSERT_EQ(p.code, 0) << p.err;
    auto before = snapshot(rd);
    Proc r = run(llmtrain_args(rd, {"run.max_steps=4", "model.n_embd=64"}));
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err.rfind("llmtrain: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("n_embd=32"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("n_embd=64"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("step_2"), std::string::npos) << r.err;
    EXPECT_EQ(snapshot(rd), before);
}

TEST_F(E2E, UnwritableRunDirFails) {
    std::ofstream(case_dir() / "a_file") << "not a directory";
    const fs::path rd = case_dir() / "a_file" / "run";
    Proc r = run(llmtrain_args(rd, {"run.max_steps=2"}));
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err.rfind("llmtrain: error: run dir '" + rd.string() + "': cannot create", 0), 0u) << r.err;
    EXPECT_EQ(read_file(case_dir() / "a_file"), "not a directory");
}

TEST_F(E2E, MissingDataFileFails) {
    const fs::path rd = case_dir() / "run";
    const std::string missing = (case_dir() / "nope" / "train.h5").string();
    Proc r = run(llmtrain_args(rd, {"run.max_steps=2", "data.train=\"" + missing + "\""}));
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err.rfind("llmtrain: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(rd));
}

TEST_F(E2E, BadConfigExits2AndWritesNothing) {
    const fs::path rd = case_dir() / "run";
    for (const std::string bad : {"run.max_steps=-5", "training.micro_batch_sise=2", "parallel.dp=2"}) {
        Proc r = run(llmtrain_args(rd, {bad}));
        EXPECT_EQ(r.code, 2) << bad << "\n" << r.err;
        EXPECT_NE(r.err.find(bad.substr(0, bad.find('='))), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(rd)) << bad;
    }
}

TEST_F(E2E, DryRunAndPrintConfig) {
    const fs::path rd = case_dir() / "run";
    Proc dry = run([&] {
        auto a = llmtrain_args(rd, {"training.grad_accum_steps=3"});
        a.push_back("--dry-run");
        return a;
    }());
    ASSERT_EQ(dry.code, 0) << dry.err;
    // GPT-2 parameter count, closed form: Vp*C + T*C + L*(12*C^2 + 13*C) + 2*C, with wte's rows
    // padded to Vp = a multiple of 128 (the layout's convention).
    const long long V = (tiny_vocab() + 127) / 128 * 128, C = 32, T = 16, L = 2;
    const long long n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    const std::string digits = std::to_string(n);
    std::string grouped;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
        grouped += digits[i];
    }
    EXPECT_NE(dry.out.find(grouped + " parameters"), std::string::npos) << dry.out;
    EXPECT_NE(dry.out.find("= 96 tokens per step"), std::string::npos) << dry.out;  // 2 x 3 x 1 x 16
    EXPECT_NE(dry.out.find("memory (this rank): params"), std::string::npos) << dry.out;
    EXPECT_FALSE(fs::exists(rd));

    Proc pc = run([&] {
        auto a = llmtrain_args(rd, {"training.grad_accum_steps=3"});
        a.push_back("--print-config");
        return a;
    }());
    ASSERT_EQ(pc.code, 0) << pc.err;
    EXPECT_FALSE(fs::exists(rd));
    // The printed config is the resolved one and loads back to itself.
    const fs::path toml = case_dir() / "printed.toml";
    std::ofstream(toml) << pc.out;
    Config back = load_config(toml.string(), {});
    EXPECT_EQ(back.training.grad_accum_steps, 3);
    EXPECT_EQ(back.training.global_batch_size, 6);
    EXPECT_EQ(back.parallel.dp, 1);
    EXPECT_EQ(to_toml(back), pc.out);
}

TEST_F(E2E, GradAccumEqualsOneBigBatch) {
    // Batch k of B=2 with accumulation 2 reads windows [4k, 4k+4) of the epoch's order, exactly
    // the windows of batch k with B=4 (the loader's rule). Sums run in another order: 1e-5 relative.
    const fs::path a = case_dir() / "accum", b = case_dir() / "big";
    Proc pa = run(llmtrain_args(a, {"run.max_steps=5", "training.grad_accum_steps=2"}));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb = run(llmtrain_args(b, {"run.max_steps=5", "training.micro_batch_size=4"}));
    ASSERT_EQ(pb.code, 0) << pb.err;
    auto la = train_losses(a), lb = train_losses(b);
    ASSERT_EQ(la.size(), 5u);
    for (int s = 1; s <= 5; ++s) {
        const double x = std::stod(la[s]), y = std::stod(lb[s]);
        EXPECT_NEAR(x, y, 1e-5 * std::fabs(y)) << "step " << s;
    }
    auto pa5 = params_of((a / "checkpoints" / "step_5").string()), pb5 = params_of((b / "checkpoints" / "step_5").string());
    expect_params_close(pa5, pb5, 0.01, 5);
}

TEST_F(E2E, DataParallelMatchesReference) {
    const fs::path rd = case_dir() / "dp2";
    const int steps = 4, B = 2;
    auto args = llmtrain_args(rd, {"run.max_steps=" + std::to_string(steps), "run.eval_interval=0"});
    args.insert(args.begin(), {MPIEXEC, "--oversubscribe", "-np", "2"});
    Proc p = run(args);
    ASSERT_EQ(p.code, 0) << p.out << p.err;
    auto losses = train_losses(rd);
    ASSERT_EQ(losses.size(), size_t(steps));

    // Reference in this process: one model, both ranks' micro-batches per step (DataLoader with
    // rank 0 and 1 of world 2), each weighted 1/(2*B*T); then the trainer's clip + AdamW step.
    Config cfg = load_config((rd / "config.toml").string(), {});
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions go;
    go.B = B;
    go.T = 16;
    GPT gpt(tiny_gpt(), go, alloc);
    gpt.init_params(cfg.run.seed);
    AdamWConfig ac{cfg.optimizer.lr, cfg.optimizer.beta1, cfg.optimizer.beta2, cfg.optimizer.eps,
                   cfg.optimizer.weight_decay};
    AdamW adam(alloc, gpt.layout(), ac, false);
    LRSchedule sched{cfg.optimizer.lr, cfg.lr_schedule.min_lr, cfg.lr_schedule.warmup_steps, steps, cfg.lr_schedule.decay};
    std::vector<std::unique_ptr<DataLoader>> loaders;
    for (int r = 0; r < 2; ++r) {
        LoaderOptions lo;
        lo.path = cfg.data.train;
        lo.B = B;
        lo.T = 16;
        lo.rank = r;
        lo.world = 2;
        lo.seed = cfg.run.seed;
        lo.vocab_size = tiny_vocab();
        loaders.push_back(std::make_unique<DataLoader>(lo));
    }
    float* scratch = static_cast<float*>(alloc.alloc(MemCategory::workspace, 4));
    std::vector<int32_t> in(B * 16), tg(B * 16);
    for (int s = 0; s < steps; ++s) {
        gpt.zero_grads();
        double loss = 0;
        for (auto& l : loaders) {
            l->next(in.data(), tg.data());
            loss += gpt.forward_backward(in.data(), tg.data(), 1.0f / (2 * B * 16)) / 2;
        }
        const float norm = grad_norm(*ops, gpt.grads(), gpt.layout().total_numel(), scratch);
        adam.step(gpt.params(), gpt.grads(), sched.at(s), clip_scale(norm, cfg.training.grad_clip));
        const double got = std::stod(losses[s + 1]);
        EXPECT_NEAR(got, loss, 1e-5 * std::fabs(loss)) << "step " << s + 1;
    }
    auto mine = params_of((rd / "checkpoints" / ("step_" + std::to_string(steps))).string());
    const float* ref = static_cast<const float*>(gpt.params());
    expect_params_close(mine, std::vector<float>(ref, ref + mine.size()), cfg.optimizer.lr, steps);
    // Only rank 0 writes: one summary in the log.
    const std::string log = read_file(rd / "log.txt");
    EXPECT_EQ(log.find("backend: cpu"), log.rfind("backend: cpu"));
    EXPECT_NE(log.find("dp 2"), std::string::npos);
}

/// Direct children of `pid` (from /proc/<child>/stat's ppid field).
std::vector<pid_t> children_of(pid_t pid) {
    std::vector<pid_t> out;
    for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::string stat = read_file(e.path() / "stat");
        auto close = stat.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(stat.substr(close + 2));
        std::string state;
        long ppid = 0;
        rest >> state >> ppid;
        if (ppid == pid) out.push_back(pid_t(std::stol(name)));
    }
    return out;
}

TEST_F(E2E, DataParallelStopsTogetherOnOneRanksSignal) {
    // SIGTERM to one rank only: the flag is all-reduced each step, so both ranks stop after the
    // same step, rank 0 saves it, and the job exits 0.
    const fs::path rd = case_dir() / "dp2";
    auto args = llmtrain_args(rd, {"run.max_steps=1000000", "run.log_interval=100000", "run.eval_interval=0",
                                   "run.sample_interval=0"});
    args.insert(args.begin(), {MPIEXEC, "--oversubscribe", "-np", "2"});
    const fs::path out = case_dir() / "mpi.out", err = case_dir() / "mpi.err";
    pid_t mpirun = spawn(args, out, err);
    bool started = false;
    for (int i = 0; i < 600 && !started; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        started = fs::exists(rd / "losses.tsv") && train_losses(rd).size() >= 3;
    }
    ASSERT_TRUE(started) << read_file(err);
    auto ranks = children_of(mpirun);
    ASSERT_EQ(ranks.size(), 2u);
    kill(ranks.back(), SIGTERM);
    Proc p = wait_for(mpirun, out, err);
    ASSERT_EQ(p.code, 0) << p.err;
    const int64_t k = train_losses(rd).rbegin()->first;
    EXPECT_NE(p.out.find("stopping after step " + std::to_string(k)), std::string::npos) << p.out;
    EXPECT_TRUE(fs::exists(rd / "checkpoints" / ("step_" + std::to_string(k)) / "state.toml"));
}

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    const int rc = RUN_ALL_TESTS();
    // ctest runs one case per entry: a filter that matches nothing must fail, not pass.
    if (::testing::UnitTest::GetInstance()->test_to_run_count() == 0) {
        std::fprintf(stderr, "no test matched the filter\n");
        return 1;
    }
    return rc;
}
