// tests/app/test_train_e2e.cpp — the llmtrain binary end to end on a tiny GPT-2 (2 layers, width 32,
// seq_len 16) and the tiny dataset of make_tiny_dataset (ctest fixture).
//
// Each case runs llmtrain as a child process and checks its exit code, stderr, run directory and
// the per-step losses in losses.tsv (%.9g: exact fp32). References:
//  - exact resume: the losses and final tensors of an uninterrupted run, compared bit for bit;
//  - gradient accumulation: one micro-batch of 2B on the same windows, 1e-5 relative;
//  - data parallel (mpirun -np 2): the same step computed here in one process from the library
//    pieces over the two ranks' windows (the loader's sharding rule), 1e-5 relative;
//  - errors: exit code, a message naming the file/key, and an untouched run directory;
//  - non-finite steps: the weights and moments of a run stopped before the blow-up, bit for bit;
//  - a hung rank (SIGSTOP): the job ends within parallel.timeout_s + 10 s, its checkpoint resumes;
//  - --dry-run --world-size: the ZeRO paper's 16 bytes of bf16 model states per parameter, 1%;
//  - ZeRO-3 resume: an uninterrupted 2-rank ZeRO-3 run, bit for bit.
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
#include <regex>
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

/// The "sample at step N: ..." line of a run's stdout, or "<none>".
std::string sample_at(const std::string& out, int step) {
    const auto at = out.find("sample at step " + std::to_string(step) + ":");
    return at == std::string::npos ? std::string("<none>") : out.substr(at, out.find('\n', at) - at);
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
    EXPECT_EQ(sample_at(pa.out, 6), sample_at(pb2.out, 6));
    EXPECT_NE(sample_at(pa.out, 6), "<none>");
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

/// argv run under mpirun with n ranks.
std::vector<std::string> under_mpirun(std::vector<std::string> argv, int n) {
    argv.insert(argv.begin(), {MPIEXEC, "--oversubscribe", "-np", std::to_string(n)});
    return argv;
}

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
    std::istringstream lines(p.out);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream ls(line);
        int stage = -1;
        const auto bar = line.find('|');
        if (!(ls >> stage) || bar == std::string::npos) continue;
        double s = 0;
        std::istringstream(line.substr(bar + 1)) >> s;
        EXPECT_FALSE(states.count(stage)) << "two rows for stage " << stage;
        states[stage] = s;
    }
    ASSERT_EQ(states.size(), 4u) << p.out;
    for (int s = 0; s <= 3; ++s) EXPECT_TRUE(states.count(s)) << "no row for stage " << s << "\n" << p.out;
    const double mib = 1024.0 * 1024.0;
    EXPECT_NEAR(states[3], 16 * psi / 64 / mib, 0.01 * 16 * psi / 64 / mib) << p.out;
    EXPECT_NEAR(states[0], 16 * psi / mib, 0.01 * 16 * psi / mib) << p.out;

    EXPECT_EQ(bad.code, 2) << bad.err;
    EXPECT_NE(bad.err.find("--world-size requires --dry-run"), std::string::npos) << bad.err;
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

    auto la = train_losses(a), lb = train_losses(b);
    ASSERT_EQ(la.size(), 8u);
    ASSERT_EQ(lb.size(), 8u);
    for (int s = 1; s <= 8; ++s) EXPECT_EQ(la[s], lb[s]) << "step " << s;
    EXPECT_NE(la[1], la[8]);  // it trains
    auto pa8 = params_of((a / "checkpoints" / "step_8").string()), pb8 = params_of((b / "checkpoints" / "step_8").string());
    EXPECT_EQ(std::memcmp(pa8.data(), pb8.data(), pa8.size() * 4), 0);
    EXPECT_EQ(sample_at(pa.out, 6), sample_at(pb2.out, 6));
    EXPECT_NE(sample_at(pa.out, 6), "<none>");
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
