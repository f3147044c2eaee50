// app/checkpoint/saver.cpp — the trainer's checkpoint write: snapshot, background writer, commit
// agreement (see saver.hpp).
#include "app/checkpoint/saver.hpp"

#include "app/checkpoint/format.hpp"
#include "parallel/nodes.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace llmtrain {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// A report's bytes: fixed-width numbers and length-prefixed strings, read back in the same order.
struct Wire {
    std::string bytes;
    size_t at = 0;
    template <class T>
    void put(T x) { bytes.append(reinterpret_cast<const char*>(&x), sizeof x); }
    void put_str(const std::string& s) {
        put(uint64_t(s.size()));
        bytes += s;
    }
    template <class T>
    T get() {
        T x{};
        if (at + sizeof x > bytes.size()) throw CheckpointError("checkpoint: a rank's report is cut short");
        std::memcpy(&x, bytes.data() + at, sizeof x);
        at += sizeof x;
        return x;
    }
    std::string get_str() {
        const uint64_t n = get<uint64_t>();
        if (at + n > bytes.size()) throw CheckpointError("checkpoint: a rank's report is cut short");
        at += n;
        return bytes.substr(at - n, n);
    }
};

}  // namespace

/// What one rank tells the others after its writer finished (serialized for the all-gather).
struct CheckpointSaver::Report {
    int32_t k = -1;               ///< the part index written, -1: none
    int32_t failed = 0;           ///< the writer failed: error says why
    double write_s = 0;           ///< the writer's time: files written, fsynced and hashed
    std::vector<PartInfo> files;  ///< its files (model.h5 slices with their ranges)
    std::string error;
};

CheckpointSaver::CheckpointSaver(Comm& comm, Allocator& alloc, const ParamLayout& layout, std::string run_dir,
                                 int parts, int keep_last, bool async, double busy_limit_s)
    : comm_(comm), alloc_(alloc), layout_(layout), run_dir_(std::move(run_dir)), parts_(parts),
      keep_last_(keep_last), async_(async), busy_limit_s_(busy_limit_s > 0 ? busy_limit_s : 1e9) {}

CheckpointSaver::~CheckpointSaver() {
    {
        std::lock_guard<std::mutex> lk(snap_mu_);
        closing_ = true;  // a writer still waiting for the copies gives up: nothing is committed now
    }
    snap_cv_.notify_all();
    if (worker_.joinable()) worker_.join();  // no MPI here: a destructor may run while unwinding
    Ops& ops = alloc_.ops();
    try {
        if (copy_pending_) ops.synchronize_event(copied_);  // no copy may land in freed memory
    } catch (...) {
    }
    if (copy_stream_) {
        ops.destroy_event(step_done_);
        ops.destroy_event(copied_);
        ops.destroy_stream(copy_stream_);
    }
    alloc_.release(snap_);
}

void CheckpointSaver::begin_copy() {
    Ops& ops = alloc_.ops();
    if (!copy_stream_) {
        copy_stream_ = ops.create_stream();
        step_done_ = ops.create_event();
        copied_ = ops.create_event();
    }
    ops.record_event(step_done_);  // on the default stream: the step that made the state
    ops.set_stream(copy_stream_);
    ops.wait_event(step_done_);
}

void CheckpointSaver::end_copy() {
    Ops& ops = alloc_.ops();
    ops.record_event(copied_);
    ops.set_stream(nullptr);
    fence_pending_ = copy_pending_ = true;
    std::lock_guard<std::mutex> lk(snap_mu_);
    snap_ready_ = false;
}

void CheckpointSaver::wait_copy() {
    if (!copy_pending_) return;
    alloc_.ops().synchronize_event(copied_);
    copies_done();
}

void CheckpointSaver::before_update() {
    if (!fence_pending_) return;
    alloc_.ops().wait_event(copied_);  // the default stream is current
    fence_pending_ = false;
}

void CheckpointSaver::copies_done() {
    copy_pending_ = false;
    {
        std::lock_guard<std::mutex> lk(snap_mu_);
        snap_ready_ = true;
    }
    snap_cv_.notify_all();
}

void CheckpointSaver::wait_snapshot() {
    std::unique_lock<std::mutex> lk(snap_mu_);
    snap_cv_.wait(lk, [this] { return snap_ready_ || closing_; });
    if (!snap_ready_) throw CheckpointError("checkpoint: the run ended before the snapshot was copied");
}

void CheckpointSaver::reserve(size_t n) {
    if (n <= snap_n_) return;
    alloc_.release(snap_);
    snap_ = nullptr;
    snap_n_ = 0;
    const size_t bytes = 3 * n * sizeof(float);
    snap_ = static_cast<float*>(alloc_.alloc_host(bytes));
    snap_n_ = n;
    const long page = sysconf(_SC_PAGESIZE);
    volatile char* p = reinterpret_cast<volatile char*>(snap_);
    for (size_t i = 0; i < bytes; i += size_t(page > 0 ? page : 4096)) p[i] = 0;
}

float* CheckpointSaver::snapshot(size_t n) {
    ckpt::fs_op();  // the crash test's kill points around the snapshot: here, before the copy ...
    reserve(n);
    return snap_;
}

void CheckpointSaver::busy(const char* what, const std::function<void()>& fn) {
    if (comm_.size() <= 1) return fn();
    run_busy(std::string(what) + " checkpoint step_" + std::to_string(step_), busy_limit_s_, fn);
}

void CheckpointSaver::start(std::function<void()> job) {
    done_ = false;
    if (!async_) {
        busy(phase_ == Phase::committing ? "committing" : "writing", job);
        done_ = true;
        return;
    }
    worker_ = std::thread([this, job = std::move(job)] {
        job();
        done_.store(true);
    });
}

void CheckpointSaver::join() {
    if (!worker_.joinable()) return;
    busy(phase_ == Phase::committing ? "committing" : "writing", [this] { worker_.join(); });
}

float CheckpointSaver::status() const {
    if (phase_ == Phase::idle) return 0;
    if (!done_.load()) return 1;
    return error_.empty() ? 0 : 2;
}

void CheckpointSaver::agree(const std::string& error, const char* what) {
    float bad = error.empty() ? 0.0f : 1.0f;
    if (comm_.size() > 1) comm_.all_reduce_max(&bad, 1);
    if (!error.empty()) throw CheckpointError(error);
    if (bad > 0) throw CheckpointError(std::string("checkpoint: another rank failed while ") + what);
}

void CheckpointSaver::abort_write() noexcept {
    if (comm_.rank() == 0 && !tmp_.empty()) abort_checkpoint(tmp_);
    phase_ = Phase::idle;
}

double CheckpointSaver::begin(int64_t step, RunLog& log, Metrics* metrics) {
    const auto t = Clock::now();
    complete(log, metrics);  // at most one checkpoint in flight
    const double waited = seconds_since(t);
    step_ = step;
    tmp_ = checkpoint_tmp_dir(run_dir_, step);
    std::string err;
    if (comm_.rank() == 0) {
        try {
            busy("opening", [this] {
                begin_checkpoint(run_dir_, step_);
                // Several writers: model.h5's structure now, each writer's weights into it later.
                if (parts_ > 1) create_model_file(tmp_, layout_);
            });
        } catch (const std::exception& e) {
            err = e.what();
        }
    }
    agree(err, "opening the checkpoint directory");
    return waited;
}

void CheckpointSaver::submit(int k, std::vector<OptimShardView> views, const TrainState& st, const std::string& error,
                             double blocked_s, RunLog& log, Metrics* metrics) {
    ckpt::fs_op();  // ... and after it
    const auto t = Clock::now();
    st_ = st;
    k_ = k;
    views_ = std::move(views);
    t0_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(blocked_s));
    blocked_s_ = blocked_s;
    written_.clear();
    error_ = error;
    write_s_ = 0;
    phase_ = Phase::writing;
    // The copies are often done already (always on the CPU backend); else the next poll() sees
    // them done (the step after waited for them) and lets the writer go.
    if (copy_pending_ && (!async_ || alloc_.ops().query_event(copied_))) wait_copy();
    if (error_.empty())
        start([this] {
            if (const char* d = std::getenv("LLMTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS"))
                std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(d)));
            try {
                wait_snapshot();
                const auto t = Clock::now();
                // The only part holds every tensor whole: model.h5 comes straight from it.
                if (k_ >= 0) written_ = write_rank_files(tmp_, k_, layout_, views_, parts_ == 1);
                write_s_ = seconds_since(t);
            } catch (const std::exception& e) {
                error_ = e.what();
            }
        });
    blocked_s_ += seconds_since(t);
    if (!async_) {
        complete(log, metrics);
        return;
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "checkpoint: step %lld in host memory, training blocked %.3f s; writing in the "
                  "background", (long long)step_, blocked_s_);
    log.line(buf);
}

std::vector<CheckpointSaver::Report> CheckpointSaver::gather() const {
    Wire mine;
    mine.put(int32_t(k_));
    mine.put(int32_t(error_.empty() ? 0 : 1));
    mine.put(write_s_);
    mine.put_str(error_);
    mine.put(uint64_t(written_.size()));
    for (const PartInfo& f : written_) {
        mine.put_str(f.name);
        mine.put(f.bytes);
        mine.put_str(f.sha256);
        mine.put(uint64_t(f.slices.size()));
        for (const ByteSlice& b : f.slices) {
            mine.put(b.lo);
            mine.put(b.hi);
            mine.put_str(b.sha256);
        }
    }
    // Reports differ in length (a ZeRO-3 rank reports a slice per tensor): lengths first, then
    // every report padded to the longest.
    const size_t W = size_t(comm_.size());
    std::vector<uint64_t> lens(W);
    uint64_t len = mine.bytes.size();
    comm_.all_gather(&len, lens.data(), sizeof len, DType::u8);
    const uint64_t longest = *std::max_element(lens.begin(), lens.end());
    mine.bytes.resize(longest);
    std::string all(W * longest, '\0');
    comm_.all_gather(mine.bytes.data(), all.data(), longest, DType::u8);
    std::vector<Report> out(W);
    for (size_t r = 0; r < W; ++r) {
        Wire w{all.substr(r * longest, lens[r])};
        Report& rep = out[r];
        rep.k = w.get<int32_t>();
        rep.failed = w.get<int32_t>();
        rep.write_s = w.get<double>();
        rep.error = w.get_str();
        for (uint64_t n = w.get<uint64_t>(); n > 0; --n) {
            PartInfo f;
            f.name = w.get_str();
            f.bytes = w.get<uint64_t>();
            f.sha256 = w.get_str();
            for (uint64_t m = w.get<uint64_t>(); m > 0; --m) {
                ByteSlice b;
                b.lo = w.get<uint64_t>();
                b.hi = w.get<uint64_t>();
                b.sha256 = w.get_str();
                f.slices.push_back(std::move(b));
            }
            rep.files.push_back(std::move(f));
        }
    }
    return out;
}

std::string CheckpointSaver::failure(const std::string& detail) const {
    return "checkpoint step_" + std::to_string(step_) + " failed: " + detail + " (the last committed checkpoint is kept)";
}

std::vector<PartInfo> CheckpointSaver::check_reports(const std::vector<Report>& reports) const {
    for (size_t r = 0; r < reports.size(); ++r)
        if (reports[r].failed) throw CheckpointError(failure("rank " + std::to_string(r) + ": " + reports[r].error));
    std::vector<int> seen(size_t(parts_), 0);
    std::vector<PartInfo> parts;
    for (const Report& r : reports) {
        if (r.k < 0) continue;
        if (r.k >= parts_ || seen[size_t(r.k)]++)
            throw CheckpointError(failure("part " + std::to_string(r.k) + " reported twice or out of range"));
        parts.insert(parts.end(), r.files.begin(), r.files.end());
    }
    for (int k = 0; k < parts_; ++k)
        if (!seen[size_t(k)]) throw CheckpointError(failure("no rank reported part " + std::to_string(k)));
    return parts;
}

void CheckpointSaver::accept_reports(const std::vector<Report>& reports) {
    reported_ = check_reports(reports);
    for (const Report& r : reports) slowest_write_s_ = std::max(slowest_write_s_, r.write_s);
    bytes_ = 0;
    for (const PartInfo& p : reported_) bytes_ += p.bytes;
}

void CheckpointSaver::commit_now() {
    // Runs on rank 0's writer thread (async) or the training thread: file-system work only.
    const auto t = Clock::now();
    try {
        dir_ = commit_checkpoint(run_dir_, tmp_, st_, layout_, reported_, keep_last_);
    } catch (const std::exception& e) {
        error_ = failure(std::string("rank 0: ") + e.what());
        abort_checkpoint(tmp_);
    }
    commit_s_ = seconds_since(t);
}

void CheckpointSaver::poll(float max_status, RunLog& log, Metrics* metrics) {
    wait_copy();  // done by now on a GPU: the step since waited for the copies before its update
    if (max_status >= 2) {  // a writer failed somewhere: every rank stops here, with its reason
        join();
        std::string err = error_;
        if (phase_ == Phase::writing) {  // every rank is: the reports name the failed rank everywhere
            try {
                check_reports(gather());
            } catch (const CheckpointError& e) {
                err = e.what();
            }
        }
        if (err.empty()) err = failure("rank 0's commit failed (its log says why)");
        abort_write();
        throw CheckpointError(err);
    }
    if (max_status > 0) return;
    const auto t = Clock::now();
    if (phase_ == Phase::writing) {  // every writer is done: agree, then rank 0 commits
        join();
        const std::vector<Report> reports = gather();
        try {
            accept_reports(reports);  // the same verdict on every rank
        } catch (const CheckpointError&) {
            abort_write();
            throw;
        }
        blocked_s_ += seconds_since(t);
        if (comm_.rank() != 0) {
            phase_ = Phase::idle;
            return;
        }
        phase_ = Phase::committing;
        error_.clear();
        start([this] { commit_now(); });
    } else if (phase_ == Phase::committing && done_.load()) {
        join();
        phase_ = Phase::idle;
        log_saved(log, metrics);
    }
}

std::string CheckpointSaver::complete(RunLog& log, Metrics* metrics) {
    const auto t = Clock::now();
    wait_copy();
    join();
    const bool was_busy = phase_ != Phase::idle;
    std::string err = phase_ == Phase::committing ? error_ : "";
    if (phase_ == Phase::writing) {
        const std::vector<Report> reports = gather();
        try {
            accept_reports(reports);
            err.clear();
            if (comm_.rank() == 0) {
                error_.clear();
                busy("committing", [this] { commit_now(); });
                err = error_;
            }
        } catch (const CheckpointError& e) {
            err = e.what();
        }
    }
    if (!err.empty()) abort_write();
    phase_ = Phase::idle;
    blocked_s_ += seconds_since(t);
    agree(err, "writing or committing the checkpoint");
    if (comm_.rank() != 0) return "";
    if (was_busy) log_saved(log, metrics);
    return dir_;
}

void CheckpointSaver::log_saved(RunLog& log, Metrics* metrics) {
    last_ = {blocked_s_, slowest_write_s_, commit_s_, seconds_since(t0_), bytes_};
    const double mib = double(bytes_) / 1048576.0;
    char buf[320];
    std::snprintf(buf, sizeof buf, "checkpoint: step_%lld: training blocked %.3f s; writers %.2f s (slowest rank; "
                  "%.1f MiB in %d part(s), %.0f MiB/s), commit %.2f s (model.h5, state.toml, rename)",
                  (long long)step_, last_.blocked_s, last_.write_s, mib, parts_,
                  last_.write_s > 0 ? mib / last_.write_s : 0.0, last_.commit_s);
    log.line(buf);
    std::snprintf(buf, sizeof buf, " (%.2f s)", last_.total_s);
    log.line("checkpoint: saved " + dir_ + buf);
    if (metrics) {
        metrics->observe_checkpoint_seconds(last_.total_s);
        metrics->set_checkpoint_phase_seconds(last_.blocked_s, last_.write_s);
    }
    slowest_write_s_ = 0;
}

}  // namespace llmtrain
