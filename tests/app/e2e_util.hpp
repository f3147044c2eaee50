// tests/app/e2e_util.hpp — what the end-to-end tests of the llmtrain binary share: spawning it as a
// child process with the tiny model and dataset, reading its losses and checkpoints.
// Included by test_train_e2e.cpp, test_train_e2e_faults.cpp and test_plan_e2e.cpp (one binary each), which define
// LLMTRAIN_BIN, TINY_DATA_DIR, RUNS_DIR and MPIEXEC through CMake.
#pragma once
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

#include "app/checkpoint/checkpoint.hpp"
#include "app/config/config.hpp"
#include "data/loader.hpp"
#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;

namespace e2e {

inline const std::string kData = TINY_DATA_DIR;

inline int tiny_vocab() {
    std::ifstream f(kData + "/vocab_size.txt");
    int v = 0;
    f >> v;
    return v;
}

inline std::string read_file(const fs::path& p) {
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
inline pid_t spawn(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err) {
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

inline Proc wait_for(pid_t pid, const fs::path& out, const fs::path& err) {
    int status = 0;
    waitpid(pid, &status, 0);
    Proc p;
    p.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    p.out = read_file(out);
    p.err = read_file(err);
    return p;
}

/// The test's scratch directory (fresh for each case).
inline fs::path case_dir() {
    const fs::path d = fs::path(RUNS_DIR) / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    return d;
}

inline Proc run(const std::vector<std::string>& argv) {
    static int n = 0;
    const fs::path base = case_dir() / ("proc" + std::to_string(n++));
    return wait_for(spawn(argv, base.string() + ".out", base.string() + ".err"), base.string() + ".out",
                    base.string() + ".err");
}

/// argv run under mpirun with n ranks.
inline std::vector<std::string> under_mpirun(std::vector<std::string> argv, int n) {
    argv.insert(argv.begin(), {MPIEXEC, "--oversubscribe", "-np", std::to_string(n)});
    return argv;
}

/// llmtrain with the tiny model and data, run dir `rd`, plus extra --set overrides.
inline std::vector<std::string> llmtrain_args(const fs::path& rd, const std::vector<std::string>& sets) {
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
inline std::map<int64_t, std::string> train_losses(const fs::path& rd) {
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
inline std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file()) out[e.path().string()] = read_file(e.path());
    return out;
}

inline GPTConfig tiny_gpt() {
    GPTConfig c;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 32;
    c.seq_len = 16;
    c.vocab_size = tiny_vocab();
    return c;
}

inline std::vector<float> params_of(const std::string& ckpt) {
    ParamLayout L(tiny_gpt());
    std::vector<float> p(L.total_numel());
    read_params(ckpt, L, p.data());
    return p;
}

/// Parameters of two runs that differ only in summation order: every element within 1e-5 + 1e-5|y|,
/// except the key bias (the middle third of attn.c_attn.bias). Its exact gradient is zero (softmax
/// ignores a constant added to every key), so its gradient is rounding noise that AdamW turns into
/// steps of up to ~lr each: there the bound is lr * steps.
inline void expect_params_close(const std::vector<float>& x, const std::vector<float>& y, double lr, int steps) {
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
inline std::string sample_at(const std::string& out, int step) {
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

/// Direct children of `pid` (from /proc/<child>/stat's ppid field).
inline std::vector<pid_t> children_of(pid_t pid) {
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

/// An 8-step run `a` straight and `b` stopped at step 4 and resumed: the same losses and final
/// weights bit for bit, and the same sample at step 6 (the sampler's RNG comes back from the
/// checkpoint). out_a and out_b: stdout of a and of b's second part.
inline void expect_resume_is_exact(const fs::path& a, const fs::path& b, const std::string& out_a,
                                   const std::string& out_b) {
    auto la = train_losses(a), lb = train_losses(b);
    ASSERT_EQ(la.size(), 8u);
    ASSERT_EQ(lb.size(), 8u);
    for (int s = 1; s <= 8; ++s) EXPECT_EQ(la[s], lb[s]) << "step " << s;
    EXPECT_NE(la[1], la[8]);  // it trains
    auto pa8 = params_of((a / "checkpoints" / "step_8").string()), pb8 = params_of((b / "checkpoints" / "step_8").string());
    ASSERT_EQ(pa8.size(), pb8.size());
    EXPECT_EQ(std::memcmp(pa8.data(), pb8.data(), pa8.size() * 4), 0);
    EXPECT_EQ(sample_at(out_a, 6), sample_at(out_b, 6));
    EXPECT_NE(sample_at(out_a, 6), "<none>");
}

/// main() of an e2e binary: ctest runs one case per entry, so a filter that matches nothing fails.
inline int e2e_main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    const int rc = RUN_ALL_TESTS();
    if (::testing::UnitTest::GetInstance()->test_to_run_count() == 0) {
        std::fprintf(stderr, "no test matched the filter\n");
        return 1;
    }
    return rc;
}

}  // namespace e2e

using namespace e2e;
