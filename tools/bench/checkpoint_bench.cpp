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

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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
    if (es == 4) {  // finite values: the writer refuses anything else (bf16: zeros)
        const std::vector<float> host(n, 0.02f);
        ops->memcpy_h2d(params, host.data(), n * 4);
        ops->synchronize();
    } else {
        ops->memset(params, 0, n * es);
    }
    adam.init_state(params);
    fs::remove_all(dir);
    fs::create_directories(dir);
    RunLog log(true);
    CheckpointSaver saver(*comm, alloc, L, dir, 1, 0, true);

    // The bare copy: the same state_to_host into the same pinned buffers, best of 3 (the first
    // also faults the buffers' pages in, as the trainer's first checkpoint does).
    float* w = saver.snapshot(n);
    double copy_s = 1e30;
    long copy_faults = 0;
    for (int i = 0; i < 3; ++i) {
        const long f0 = minor_faults();
        const auto t = Clock::now();
        adam.state_to_host(params, w, w + n, w + 2 * n);
        copy_s = std::min(copy_s, since(t));
        copy_faults = minor_faults() - f0;
    }

    // Two checkpoints as the trainer takes them (the second is reported: the first also faults in
    // the snapshot buffers' pages), each followed by "training" (sleeps) with a poll per step.
    double ckpt_copy_s = 0;
    long ckpt_faults = 0;
    int steps = 0;
    for (int64_t step = 1; step <= 2; ++step) {
        const auto t0 = Clock::now();
        const double waited = saver.begin(step, log, nullptr);
        w = saver.snapshot(n);
        const long f0 = minor_faults();
        const auto tc = Clock::now();
        saver.begin_copy();  // as the trainer: the saver's stream, the host waits only to time it
        adam.state_to_host(params, w, w + n, w + 2 * n, false);
        saver.end_copy();
        saver.wait_copy();
        ckpt_copy_s = since(tc);
        ckpt_faults = minor_faults() - f0;
        TrainState st;
        st.step = step;
        st.run_id = "checkpoint-bench";
        st.model = gpt2(model);
        st.backend = ops->name();
        st.precision = precision;
        saver.submit(0, {OptimShardView{0, n, w + n, w + 2 * n, w}}, st, "", since(t0) - waited, log, nullptr);
        const int64_t before = steps;
        while (saver.status() != 0 || steps == before) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            ++steps;
            saver.poll(saver.status(), log, nullptr);
        }
        if (step == 1) steps = 0;
    }
    saver.complete(log, nullptr);
    const CheckpointTimes c = saver.last();
    fs::remove_all(fs::path(dir) / "checkpoints");  // room for dd's file (1.5B: 19 GB of parts)

    // dd: the same bytes, sequential, fsynced once at the end, in the same directory; twice, and
    // the mean taken, since the disk is shared with whatever else runs.
    const size_t mib = size_t(double(c.bytes) / 1048576.0 + 0.5);
    const std::string ddf = (fs::path(dir) / "dd.bin").string();
    const std::string cmd = "dd if=/dev/zero of='" + ddf + "' bs=1M count=" + std::to_string(mib) +
                            " conv=fsync status=none";
    double dd_s = 0;
    for (int i = 0; i < 2; ++i) {
        const auto td = Clock::now();
        if (std::system(cmd.c_str()) != 0) {
            std::fprintf(stderr, "checkpoint_bench: %s failed\n", cmd.c_str());
            return 1;
        }
        dd_s += since(td) / 2;
        fs::remove(ddf);
    }
    fs::remove_all(dir);

    const double MiB = double(c.bytes) / 1048576.0;
    std::printf("checkpoint bench: GPT-2 %s (%zu parameters), %s backend (%s), one rank, %.1f MiB of files "
                "(optim_0.h5 + model.h5)\n", model.c_str(), L.num_parameters(), ops->name(), precision.c_str(), MiB);
    std::printf("  copy of the state to pinned host memory: %.3f s inside the checkpoint (%ld minor page faults), "
                "%.3f s alone (best of 3; %ld faults in the last)\n", ckpt_copy_s, ckpt_faults, copy_s, copy_faults);
    std::printf("  training blocked by the checkpoint: %.3f s = %.2fx its copy (goal <= 1.2x), %.2fx the best copy; "
                "training went on for %d polls (20 ms steps) while it was written and committed\n", c.blocked_s,
                c.blocked_s / ckpt_copy_s, c.blocked_s / copy_s, steps);
    std::printf("  writer: %.2f s = %.0f MiB/s (files, fsync, SHA-256); dd of the same %zu MiB with fsync: %.2f s (mean of 2) = "
                "%.0f MiB/s; writer / dd = %.2f (goal >= 0.8)\n", c.write_s, MiB / c.write_s, mib, dd_s,
                double(mib) / dd_s, (MiB / c.write_s) / (double(mib) / dd_s));
    std::printf("  commit (state.toml, rename, latest; one part: model.h5 written by the writer): %.2f s; snapshot to commit %.2f s\n",
                c.commit_s, c.total_s);
    alloc.release(params);
    return 0;
}
