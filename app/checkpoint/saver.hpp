// app/checkpoint/saver.hpp — the checkpoint write as the trainer drives it: a snapshot of this
// rank's state in host memory, a background writer thread per rank, the commit agreement over
// small MPI messages, and at most one checkpoint in flight (docs/checkpoints.md "Checkpoints",
// "Asynchronous checkpoints").
//
// Protocol, every rank alike (the training thread makes every MPI call; the writer thread only
// touches files, so MPI needs no MPI_THREAD_MULTIPLE):
//   step s   begin(): wait for the checkpoint in flight (complete()); rank 0 opens .tmp_step_s; all
//            agree. The trainer queues the copy of its shard (weights, m, v) into snapshot() on
//            the saver's own stream (begin_copy() ... end_copy(): after the step's queued work, by
//            an event) and calls submit(): the writer thread waits for the copies, then writes
//            optim_<k>.h5 and its slices of model.h5 (which rank 0 laid out in begin(); model.h5
//            whole when it is the only part), fsyncs and hashes them; training goes on at once. Before the next optimizer step the compute
//            stream waits for the copies (before_update()), so the next forward and backward run
//            beside them on a GPU; on the CPU backend copies run at once.
//   step s+j at each step boundary (poll(); on a GPU it first confirms the copies are done and
//            lets the writer start, if submit() found them still running) every rank contributes status() to the step's max over the ranks
//            (a collective the loop already makes for the stop flag) and calls poll() with it: the
//            same value on every rank, so every rank acts at the same step. 0 (no writer busy):
//            the reports (file names, sizes, SHA-256, errors) are all-gathered; rank 0 checks that
//            every expected part is there and starts the commit (model.h5's slices sealed,
//            state.toml, rename, `latest`: no file re-read) on its writer thread. 2 (a writer failed): every rank
//            throws CheckpointError; the temporary directory is removed, the last committed
//            checkpoint stays.
//   stop     complete() at the next checkpoint, a stop signal and the end of the run: every rank
//            waits for its writer, agrees, rank 0 commits and waits; a failure throws everywhere.
// With async = false submit() ends with complete(): the synchronous checkpoint.
// Every wait of the training thread on file work — its writer thread, rank 0's commit, rank 0
// opening the directory — runs under run_busy (parallel/nodes.hpp): the thread answers liveness
// pings "busy: writing/committing checkpoint step_<N>", so a rank waiting on it in a collective keeps
// waiting past parallel.timeout_s, up to checkpoint.timeout_s (docs/checkpoints.md "Who does what
// at a commit").
// Test hook: LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS=<ms> makes each writer sleep that long before
// it writes (tests/app/test_train_e2e_faults.cpp: training goes on, checkpoints never overlap).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"
#include "app/report/metrics.hpp"
#include "app/report/run_log.hpp"
#include "model/allocator.hpp"
#include "parallel/comm.hpp"

namespace llmtrain {

/// The figures of the last committed checkpoint (log, metrics, tools/bench/checkpoint_bench).
struct CheckpointTimes {
    double blocked_s = 0;  ///< the training thread's time in it: open, snapshot, agreement, waits
    double write_s = 0;    ///< the slowest rank's part write: files, fsync, SHA-256
    double commit_s = 0;   ///< rank 0's commit: model.h5's slices sealed, state.toml, renames, pruning
    double total_s = 0;    ///< from the snapshot to the commit
    uint64_t bytes = 0;    ///< the parts' bytes (model.h5 not included)
};

class CheckpointSaver {
public:
    /// comm: every rank of the run (host buffers); parts: how many shard parts make a checkpoint
    /// (pipeline stages x ZeRO group size: one per rank of replica 0); alloc: for the pinned
    /// snapshot buffers; async: checkpoint.async (the same on every rank: app/main.cpp checks it;
    /// HDF5 calls are serialized by h5::Lock, so no local library overrules it).
    CheckpointSaver(Comm& comm, Allocator& alloc, const ParamLayout& layout, std::string run_dir, int parts,
                    int keep_last, bool async, double busy_limit_s);
    /// Waits for a writer still running (its checkpoint stays uncommitted); never throws.
    ~CheckpointSaver();
    CheckpointSaver(const CheckpointSaver&) = delete;
    CheckpointSaver& operator=(const CheckpointSaver&) = delete;

    /// Collective: complete() for the checkpoint in flight, then rank 0 opens the temporary
    /// directory of `step` and every rank agrees. Returns the seconds spent in complete() (counted
    /// as the previous checkpoint's blocked time). Errors: CheckpointError (on every rank).
    double begin(int64_t step, RunLog& log, Metrics* metrics);
    /// Allocates the snapshot buffers for n elements (see snapshot()) if they are smaller, and
    /// writes one byte of every page, so that no checkpoint's copy pays for mapping fresh pages
    /// (the CPU backend's host memory is mapped at first touch: GPT-2 124M's 1.5 GB are ~370k page
    /// faults; pinned CUDA memory is resident already). The trainer calls it at start.
    /// Errors: std::runtime_error when the memory cannot be had.
    void reserve(size_t n);
    /// Elements the snapshot buffers hold now (reserve(), snapshot()): 0 until a checkpoint needs them.
    size_t reserved() const { return snap_n_; }
    /// Host fp32 buffers for this rank's snapshot: w, m, v of n elements each, back to back (3n),
    /// pinned (Allocator::alloc_host, counted as host memory), kept for the next checkpoints
    /// (reserve(n)). Valid until the next begin(). Errors: std::runtime_error when the memory
    /// cannot be had.
    float* snapshot(size_t n);
    /// Training thread, around this rank's copies into snapshot(): begin_copy() makes the saver's
    /// own stream (made at the first call) wait for the work queued so far on the compute stream
    /// (the default stream) and makes it current; end_copy() records the copies' end on it and
    /// makes the default stream current again. The copies may still run after end_copy().
    void begin_copy();
    void end_copy();
    /// The host waits for the copies queued between begin_copy() and end_copy() (before the
    /// training thread reads the snapshot itself).
    void wait_copy();
    /// Training thread, before the optimizer next changes the state (weights, m, v): the default
    /// stream waits for the snapshot's copies (queued once after each end_copy(); else nothing).
    void before_update();
    /// Hands this rank's part to the writer: k = its part index (-1: this rank writes nothing),
    /// views into snapshot() (w, m, v set); st: the train state (used on rank 0); error: a
    /// problem found while taking the snapshot (fails the checkpoint); blocked_s: the training
    /// thread's time in this checkpoint so far, the wait for the previous one (begin()'s return)
    /// left out (for the log and metrics). With async = false it
    /// writes and commits before returning (collective). Errors: CheckpointError.
    void submit(int k, std::vector<OptimShardView> views, const TrainState& st, const std::string& error,
                double blocked_s, RunLog& log, Metrics* metrics);
    /// This rank's part of the step's max over the ranks: 0 nothing running, 1 its writer is busy,
    /// 2 its writer failed.
    float status() const;
    /// Training thread, at a step boundary, every rank with the same max_status (the max of
    /// status() over the ranks): see the protocol above. Errors: CheckpointError on every rank.
    void poll(float max_status, RunLog& log, Metrics* metrics);
    /// Collective: finishes the checkpoint in flight (waits, agrees, commits) and returns the last
    /// committed checkpoint's directory on rank 0 ("" elsewhere). Errors: CheckpointError.
    std::string complete(RunLog& log, Metrics* metrics);
    /// No checkpoint in flight (none begun, or the last one committed and logged, or failed).
    bool idle() const { return phase_ == Phase::idle; }
    /// Rank 0: the last committed checkpoint's figures.
    const CheckpointTimes& last() const { return last_; }
    /// Whether checkpoints are written in the background (checkpoint.async).
    bool async() const { return async_; }

private:
    enum class Phase { idle, writing, committing };
    /// What one rank tells the committing rank after its writer finished.
    struct Report;

    /// Runs fn (file work, or the wait for the writer thread) on the training thread's behalf while
    /// that thread answers liveness pings "busy: <what> checkpoint step_<N>" (parallel/nodes.hpp
    /// run_busy): ranks waiting on this one in a collective keep waiting, up to busy_limit_s, instead
    /// of failing at parallel.timeout_s. fn makes no MPI call.
    void busy(const char* what, const std::function<void()>& fn);
    void start(std::function<void()> job);  // runs job on the writer thread (async) or now
    void copies_done();  // the snapshot's copies are complete: the writer may read it
    void wait_snapshot();  // writer thread: until copies_done() (or the saver is destroyed)
    void join();
    std::vector<Report> gather() const;
    /// Rank 0: the reported parts for the commit, or throws naming what is missing or failed.
    std::vector<PartInfo> check_reports(const std::vector<Report>& reports) const;
    /// Every rank's same verdict on the reports: reported_ (check_reports), the slowest writer's
    /// time and the bytes written. Throws as check_reports.
    void accept_reports(const std::vector<Report>& reports);
    void agree(const std::string& error, const char* what);
    /// "checkpoint step_<N> failed: <detail> (the last committed checkpoint is kept)".
    std::string failure(const std::string& detail) const;
    void abort_write() noexcept;
    void commit_now();
    void log_saved(RunLog& log, Metrics* metrics);

    Comm& comm_;
    Allocator& alloc_;
    const ParamLayout& layout_;
    const std::string run_dir_;
    const int parts_, keep_last_;
    const bool async_;
    const double busy_limit_s_;  // checkpoint.timeout_s (0: no limit)
    float* snap_ = nullptr;  // 3 * snap_n_ floats, pinned
    size_t snap_n_ = 0;
    // The snapshot's stream and its two events: the step's work queued before it, its copies' end.
    Stream copy_stream_ = nullptr;
    Event step_done_ = nullptr, copied_ = nullptr;
    bool fence_pending_ = false;  // before_update() has a wait to queue
    bool copy_pending_ = false;   // the host has not seen the copies complete yet
    std::mutex snap_mu_;
    std::condition_variable snap_cv_;
    bool snap_ready_ = true, closing_ = false;  // guarded by snap_mu_

    Phase phase_ = Phase::idle;
    std::thread worker_;
    std::atomic<bool> done_{true};
    // Written by the writer thread before done_ is set, read by the training thread after.
    std::string error_;
    std::vector<PartInfo> written_;  // this rank's files
    double write_s_ = 0, commit_s_ = 0;
    std::string dir_;  // rank 0: the committed directory
    // The checkpoint in flight.
    int64_t step_ = -1;
    std::string tmp_;
    TrainState st_;
    int k_ = -1;
    std::vector<OptimShardView> views_;
    std::vector<PartInfo> reported_;  // every rank's files, as agreed (the commit's input)
    std::chrono::steady_clock::time_point t0_;
    double blocked_s_ = 0, slowest_write_s_ = 0;
    uint64_t bytes_ = 0;
    CheckpointTimes last_;
};

}  // namespace llmtrain
