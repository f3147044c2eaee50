// tools/bench/checkpoint_bench.cpp — what an asynchronous checkpoint costs training, in one run
// (issue #20): the time the training thread is held up (CheckpointSaver: open, snapshot, the
// agreement at a later step) against the bare copy of the rank's state into host memory (goal
// <= 1.2x), and the writer's throughput (its two files, optim_0.h5 and model.h5, written, fsynced
// and hashed) against dd's sequential write of the same bytes with an fsync, in the same directory
// (goal >= 80%). The state is a GPT-2 model's on one rank (ZeRO-0), fp32 on the CPU backend, bf16
// with fp32 master weights on CUDA; the "training" between polls is a 20 ms sleep. Minor page
// faults are counted around each copy (a copy into pages touched for the first time pays for them).
// On CUDA the copy inside the checkpoint goes on the saver's own stream and the host does not wait
// for it in the trainer; here it waits (wait_copy) so that the copy itself is timed.
//
// Usage: checkpoint_bench [--backend cpu|cuda] [--model 124M|350M|774M|1.5B (default 124M)]
//                         [--dir DIR (default ./checkpoint_bench_dir, removed after)]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "app/checkpoint/saver.hpp"
#include "model/backend.hpp"
#include "optim/adamw.hpp"
#include "parallel/comm.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Minor page faults of this process so far (first touches of fresh pages, among others).
long minor_faults() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

GPTConfig gpt2(const std::string& size) {
    // GPT-2's shapes (Radford et al. 2019, table 2), vocab 50257, context 1024.
    const int n_layer = size == "1.5B" ? 48 : size == "774M" ? 36 : size == "350M" ? 24 : 12;
    const int n_embd = size == "1.5B" ? 1600 : size == "774M" ? 1280 : size == "350M" ? 1024 : 768;
    return GPTConfig{n_layer, n_embd / 64, n_embd, 1024, 50257};
}

}  // namespace

int main(int argc, char** argv) {
    std::string backend = "cpu", model = "124M", dir = "checkpoint_bench_dir";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--backend") backend = argv[i + 1];
        else if (a == "--model") model = argv[i + 1];
        else if (a == "--dir") dir = argv[i + 1];
        else {
            std::fprintf(stderr, "checkpoint_bench: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    mpi_init_once(&argc, &argv);
    auto comm = make_mpi_comm();
    const std::string precision = backend == "cuda" ? "bf16" : "fp32";
    auto ops = make_backend(backend, precision);
    Allocator alloc(*ops);
    const ParamLayout L(gpt2(model));
    const size_t n = L.total_numel(), es = dtype_size(ops->act_dtype());
    AdamW adam(alloc, L, AdamWConfig{}, ops->act_dtype() != DType::f32);
    void* params = alloc.alloc(MemCategory::params, n * es);
    {
        // A state like a trained model's: no constant pages (zeros, repeated values) that memory or
        // disk layers below could treat specially. xorshift64 values: w and m in +-2^-7, v in [0, 2^-14).
        std::vector<float> w(n), m(n), v(n);
        uint64_t x = 88172645463325252ull;
        auto next = [&] {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            return float(int64_t(x >> 40) - (int64_t(1) << 23)) * 0x1p-30f;
        };
        for (size_t i = 0; i < n; ++i) {
            w[i] = next();
            m[i] = next();
            v[i] = next() * next() * 4.0f;
            if (v[i] < 0) v[i] = -v[i];
        }
        if (es == 4) {
            ops->memcpy_h2d(params, w.data(), n * 4);
        } else {  // bf16 params: the fp32 master weights hold w (state_from_host)
            ops->memset(params, 0, n * es);
        }
        ops->synchronize();
        adam.state_from_host(w.data(), m.data(), v.data());
    }
    fs::remove_all(dir);
    fs::create_directories(dir);
    RunLog log(true);
    CheckpointSaver saver(*comm, alloc, L, dir, 1, /*keep_last=*/1, true, /*busy_limit_s=*/0);
    saver.reserve(n);  // as the trainer does at start

    // Three rounds, each: the bare copy (the same state_to_host into the same pinned buffers,
    // waited for), then a checkpoint as the trainer takes it, followed by "training" (sleeps) with
    // a poll per step until it is committed. Best of 3 and mean of 3 of each figure.
    const int kRounds = 3;
    std::vector<double> copy_s, ckpt_copy_s, blocked_s, write_s, commit_s, total_s;
    long copy_faults = 0, ckpt_faults = 0;
    int steps = 0;
    uint64_t bytes = 0;
    // Each copy comes after the same 1 s in which nothing touches the snapshot (as between
    // checkpoints in training, where it sits idle): a copy right after another runs faster.
    auto train_for = [&](double s) {
        for (const auto t = Clock::now(); since(t) < s;) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            saver.poll(saver.status(), log, nullptr);
        }
    };
    for (int64_t step = 1; step <= kRounds; ++step) {
        train_for(1.0);
        float* w = saver.snapshot(n);
        long f0 = minor_faults();
        auto t = Clock::now();
        adam.state_to_host(params, w, w + n, w + 2 * n);
        copy_s.push_back(since(t));
        copy_faults += minor_faults() - f0;

        train_for(1.0);
        const auto t0 = Clock::now();
        const double waited = saver.begin(step, log, nullptr);
        w = saver.snapshot(n);
        f0 = minor_faults();
        t = Clock::now();
        saver.begin_copy();  // as the trainer: the saver's stream, the host waits only to time it
        adam.state_to_host(params, w, w + n, w + 2 * n, false);
        saver.end_copy();
        saver.wait_copy();
        ckpt_copy_s.push_back(since(t));
        ckpt_faults += minor_faults() - f0;
        TrainState st;
        st.step = step;
        st.run_id = "checkpoint-bench";
        st.model = gpt2(model);
        st.backend = ops->name();
        st.precision = precision;
        saver.submit(0, {OptimShardView{0, n, w + n, w + 2 * n, w}}, st, "", since(t0) - waited, log, nullptr);
        do {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            ++steps;
            saver.poll(saver.status(), log, nullptr);
        } while (saver.status() != 0 || !saver.idle());
        const CheckpointTimes c = saver.last();
        blocked_s.push_back(c.blocked_s);
        write_s.push_back(c.write_s);
        commit_s.push_back(c.commit_s);
        total_s.push_back(c.total_s);
        bytes = c.bytes;
    }
    saver.complete(log, nullptr);
    fs::remove_all(fs::path(dir) / "checkpoints");  // room for dd's file (1.5B: 19 GB of parts)

    // dd: the same bytes, sequential, fsynced once at the end, in the same directory; twice (best
    // and mean), since the disk is shared with whatever else runs.
    const size_t mib = size_t(double(bytes) / 1048576.0 + 0.5);
    const std::string ddf = (fs::path(dir) / "dd.bin").string();
    const std::string cmd = "dd if=/dev/zero of='" + ddf + "' bs=1M count=" + std::to_string(mib) +
                            " conv=fsync status=none";
    std::vector<double> dd_s;
    for (int i = 0; i < 2; ++i) {
        const auto td = Clock::now();
        if (std::system(cmd.c_str()) != 0) {
            std::fprintf(stderr, "checkpoint_bench: %s failed\n", cmd.c_str());
            return 1;
        }
        dd_s.push_back(since(td));
        fs::remove(ddf);
    }
    fs::remove_all(dir);

    const double MiB = double(bytes) / 1048576.0;
    auto best = [](const std::vector<double>& x) { return *std::min_element(x.begin(), x.end()); };
    auto mean = [](const std::vector<double>& x) { return std::accumulate(x.begin(), x.end(), 0.0) / double(x.size()); };
    auto list = [](const std::vector<double>& x) {
        std::string s;
        for (double v : x) {
            if (!s.empty()) s += ' ';
            s += std::to_string(v).substr(0, 5);
        }
        return s;
    };
    std::printf("checkpoint bench: GPT-2 %s (%zu parameters), %s backend (%s), one rank, %.1f MiB of files "
                "(optim_0.h5 + model.h5), %d checkpoints\n", model.c_str(), L.num_parameters(), ops->name(),
                precision.c_str(), MiB, kRounds);
    std::printf("  copy of the state to pinned host memory, s: alone %s (%ld minor page faults in all), inside the "
                "checkpoint %s (%ld faults)\n", list(copy_s).c_str(), copy_faults, list(ckpt_copy_s).c_str(), ckpt_faults);
    std::printf("  training blocked by the checkpoint, s: %s; best %.3f = %.2fx the best copy alone (goal <= 1.2x), "
                "mean %.3f = %.2fx the mean copy alone; training went on for %d polls (20 ms steps) while they were "
                "written and committed\n", list(blocked_s).c_str(), best(blocked_s), best(blocked_s) / best(copy_s),
                mean(blocked_s), mean(blocked_s) / mean(copy_s), steps);
    std::printf("  writer (files, fsync, SHA-256), s: %s; mean %.0f MiB/s, best %.0f MiB/s; dd of the same %zu MiB "
                "with fsync, s: %s; mean %.0f MiB/s, best %.0f MiB/s; writer / dd = %.2f (means), %.2f (bests) "
                "(goal >= 0.8)\n", list(write_s).c_str(), MiB / mean(write_s), MiB / best(write_s), mib,
                list(dd_s).c_str(), double(mib) / mean(dd_s), double(mib) / best(dd_s),
                (MiB / mean(write_s)) / (double(mib) / mean(dd_s)), (MiB / best(write_s)) / (double(mib) / best(dd_s)));
    // One line in the form tools/gpu/gpu_report.py reads: means throughout.
    std::printf("  summary: training blocked by the checkpoint: %.3f s = %.2fx its copy (means of 3; goal <= 1.2x); "
                "writer / dd = %.2f (means; %.2f best against best; goal >= 0.8)\n", mean(blocked_s),
                mean(blocked_s) / mean(copy_s), (MiB / mean(write_s)) / (double(mib) / mean(dd_s)),
                (MiB / best(write_s)) / (double(mib) / best(dd_s)));
    std::printf("  commit (state.toml, rename, latest, pruning; one part: model.h5 came from the writer), s: %s; "
                "snapshot to commit, s: %s\n", list(commit_s).c_str(), list(total_s).c_str());
    alloc.release(params);
    return 0;
}
