// tests/app/test_checkpoint_recovery.cpp — resume lookup and what a failure or a crash in the write
// protocol leaves behind (app/checkpoint/checkpoint.hpp): `latest` followed, damaged and half-written
// checkpoints passed over with a note, leftovers tidied at start, and the OS failing under the
// protocol: an fsync that must happen, a removal or a directory listing that fails, a crash in the
// middle of pruning.
//
// The OS failures are injected by this binary's own fsync, remove, unlinkat and readdir, which
// stand in for the C library's (the dynamic linker binds the program's definitions first) and call
// it unless a test armed them: fsync records the paths it syncs; remove fails with EIO for one
// file name; readdir fails with EIO in one directory; remove and unlinkat raise SIGKILL after the
// first entry removed under a directory whose path holds a given text (a crash, run in a gtest
// death test's child). References: the files as the test wrote them, `latest` as read here, and
// checkpoint_problem for what verifies. Tests marked "fails on the old code" say what the version
// before issue #31 did.
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>

#include "app/checkpoint/saver.hpp"
#include "tests/app/checkpoint_test_util.hpp"

namespace inject {

std::mutex mu;
std::vector<std::pair<std::string, bool>> fsynced;  ///< (path, it held checkpoints/ then), while `record`
bool record = false;
std::string fail_readdir;  ///< a directory (canonical path) whose readdir() fails with EIO
std::string kill_under;    ///< SIGKILL after the first removal under a path holding this text

std::string fd_path(int fd) {
    char buf[4096];
    const ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

template <class F>
F real(const char* name) {
    return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

void disarm() {
    std::lock_guard<std::mutex> lk(mu);
    fsynced.clear();
    record = false;
    fail_readdir.clear();
    kill_under.clear();
}

}  // namespace inject

extern "C" int fsync(int fd) {
    static const auto f = inject::real<int (*)(int)>("fsync");
    {
        std::lock_guard<std::mutex> lk(inject::mu);
        if (inject::record) {
            const std::string p = inject::fd_path(fd);
            std::error_code ec;
            inject::fsynced.emplace_back(p, fs::is_directory(fs::path(p) / "checkpoints", ec));
        }
    }
    return f(fd);
}

extern "C" int remove(const char* path) noexcept {
    static const auto f = inject::real<int (*)(const char*)>("remove");
    const int r = f(path);
    if (r == 0 && !inject::kill_under.empty() && fs::path(path).parent_path().string().find(inject::kill_under) != std::string::npos)
        std::raise(SIGKILL);
    return r;
}

extern "C" int unlinkat(int dirfd, const char* path, int flags) noexcept {
    static const auto f = inject::real<int (*)(int, const char*, int)>("unlinkat");
    const int r = f(dirfd, path, flags);
    if (r == 0 && !inject::kill_under.empty() && inject::fd_path(dirfd).find(inject::kill_under) != std::string::npos)
        std::raise(SIGKILL);
    return r;
}

extern "C" struct dirent* readdir(DIR* d) {
    static const auto f = inject::real<struct dirent* (*)(DIR*)>("readdir");
    if (!inject::fail_readdir.empty() && inject::fd_path(dirfd(d)) == inject::fail_readdir) {
        errno = EIO;
        return nullptr;
    }
    return f(d);
}

namespace {

struct Recovery : Ckpt {
    void TearDown() override { inject::disarm(); }
};

/// The names in dir, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_F(Ckpt, IncompleteDirectoriesAreIgnored) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string good = save(L, 4, 0, p, m, v);
    const fs::path ck = dir / "checkpoints";
    // A crashed write of step 6 and a step_8 without its state file (written last).
    fs::copy(good, ck / ".tmp_step_6", fs::copy_options::recursive);
    fs::copy(good, ck / "step_8", fs::copy_options::recursive);
    fs::remove(ck / "step_8" / "state.toml");
    fs::create_directories(ck / "step_x9");
    const ResumeChoice c = resolve_resume("auto", dir.string(), false);
    EXPECT_EQ(c.dir, good);
    EXPECT_EQ(c.run_id, "run-a");
    ASSERT_EQ(c.skipped.size(), 1u);  // step_8; .tmp_step_6 and step_x9 are not checkpoints at all
    EXPECT_EQ(c.skipped[0].rfind("skipped step_8: ", 0), 0u) << c.skipped[0];
    EXPECT_NE(c.skipped[0].find("state.toml"), std::string::npos) << c.skipped[0];
    EXPECT_EQ(resolve_resume("none", dir.string(), true).dir, "");
    EXPECT_THROW(resolve_resume((ck / "step_8").string(), dir.string(), false), CheckpointError);
    EXPECT_THROW(resolve_resume((ck / "nope").string(), dir.string(), false), CheckpointError);
    EXPECT_EQ(resolve_resume(good, dir.string(), false).dir, good);
    EXPECT_EQ(find_latest_checkpoint((dir / "no_such_run").string(), "run-a").dir, "");
    EXPECT_EQ(resolve_resume("auto", (dir / "no_such_run").string(), false).dir, "");
}

TEST_F(Ckpt, DamagedCheckpointIsSkipped) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string two = save(L, 2, 0, p, m, v);
    for (const char* f : {"model.h5", "optim_0.h5", "state.toml"}) {
        const std::string four = save(L, 4, 0, p, m, v);
        const fs::path file = fs::path(four) / f;
        flip_byte(file, fs::file_size(file) * 2 / 3);
        const ResumeChoice c = resolve_resume("auto", dir.string(), false);
        EXPECT_EQ(c.dir, two) << f;
        ASSERT_EQ(c.skipped.size(), 2u) << f;  // why `latest` (step_4) is not followed, then step_4 skipped
        EXPECT_EQ(c.skipped[0].rfind("checkpoint: checkpoints/latest names step_4, which does not verify (", 0), 0u)
            << c.skipped[0];
        EXPECT_EQ(c.skipped[1].rfind("skipped step_4: ", 0), 0u) << c.skipped[1];
        EXPECT_NE(c.skipped[1].find(std::string(f) == "state.toml" ? "state_sha256" : f), std::string::npos)
            << c.skipped[1];
        EXPECT_NE(checkpoint_problem(four), "");
    }
    // A truncated file and an extra shard file are caught too.
    const std::string four = save(L, 4, 0, p, m, v);
    fs::resize_file(fs::path(four) / "model.h5", fs::file_size(fs::path(four) / "model.h5") - 1);
    EXPECT_NE(checkpoint_problem(four).find("model.h5"), std::string::npos);
    const std::string six = save(L, 6, 0, p, m, v);
    fs::copy_file(fs::path(six) / "optim_0.h5", fs::path(six) / "optim_1.h5");
    EXPECT_NE(checkpoint_problem(six).find("optim_1.h5 is not listed"), std::string::npos);
    // Nothing verifies any more: auto refuses rather than silently starting over.
    fs::remove_all(two);
    EXPECT_THROW(resolve_resume("auto", dir.string(), false), CheckpointError);
}

// Lineage: auto continues the run that wrote `latest`, never another run's newer checkpoint.
// Fails on the old code: it took the highest step whatever run wrote it.
TEST_F(Ckpt, AutoResumesOnlyThisRun) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    save(L, 2, 0, p, m, v, "run-a");
    const std::string a8 = save(L, 8, 0, p, m, v, "run-a");
    const std::string b3 = save(L, 3, 0, p, m, v, "run-b");  // a new run started there with overwrite
    EXPECT_EQ(current_run_id(dir.string()), std::optional<std::string>("run-b"));
    ResumeChoice c = resolve_resume("auto", dir.string(), false);
    EXPECT_EQ(c.dir, b3);
    EXPECT_EQ(c.run_id, "run-b");
    ASSERT_EQ(c.skipped.size(), 1u);
    EXPECT_NE(c.skipped[0].find("skipped step_8: belongs to run run-a"), std::string::npos) << c.skipped[0];
    // `latest` damaged: the newest verified checkpoint names the run (documented fallback).
    spit(ck() / "latest", "step_9\n");
    EXPECT_EQ(resolve_resume("auto", dir.string(), false).dir, a8);
    // latest's target damaged in a data file only: its state.toml still names the run.
    spit(ck() / "latest", "step_3\n");
    flip_byte(fs::path(b3) / "model.h5", 100);
    EXPECT_THROW(resolve_resume("auto", dir.string(), false), CheckpointError);  // run-b has nothing else
}

// resume = "none" must not start a second run over an existing one by accident. Fails on the old
// code: it started from scratch (and pruning then deleted the first run's checkpoints).
TEST_F(Ckpt, NoneRefusesARunDirWithCheckpoints) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    EXPECT_EQ(resolve_resume("none", dir.string(), false).dir, "");  // nothing there yet
    save(L, 2, 0, p, m, v);
    save(L, 5, 0, p, m, v);
    try {
        resolve_resume("none", dir.string(), false);
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("run dir " + dir.string() + " already holds checkpoints of run run-a "
                                             "(it continues from step_5); set checkpoint.resume = \"auto\""),
                  std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("checkpoint.overwrite = true"), std::string::npos) << e.what();
    }
    EXPECT_EQ(resolve_resume("none", dir.string(), true).dir, "");
}

// A crash in the middle of replacing step_4 (moved aside, new one not yet in place) loses
// nothing: start-up recovery restores it and removes the other leftovers. Fails on the old code:
// auto resume ignored .old_step_4 and went back to step_2.
TEST_F(Ckpt, LeftoversAreRecovered) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    save(L, 2, 0, p, m, v);
    const std::string four = save(L, 4, 0, p, m, v);
    const std::string ref = slurp(fs::path(four) / "model.h5");
    fs::rename(four, ck() / ".old_step_4");
    fs::copy(ck() / "step_2", ck() / ".tmp_step_4", fs::copy_options::recursive);
    fs::copy(ck() / "step_2", ck() / ".old_step_2", fs::copy_options::recursive);  // step_2 exists: stale
    spit(ck() / "latest.tmp", "step_4\n");
    const auto notes = recover_checkpoint_leftovers(dir.string());
    EXPECT_EQ(notes.size(), 4u);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(ck())) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_2", "step_4"}));
    EXPECT_EQ(slurp(fs::path(four) / "model.h5"), ref);
    EXPECT_EQ(resolve_resume("auto", dir.string(), false).dir, four);
    // A damaged .old_step_4 is not brought back.
    fs::rename(four, ck() / ".old_step_4");
    flip_byte(ck() / ".old_step_4" / "model.h5", 50);
    recover_checkpoint_leftovers(dir.string());
    EXPECT_FALSE(fs::exists(ck() / "step_4"));
    EXPECT_FALSE(fs::exists(ck() / ".old_step_4"));
    EXPECT_TRUE(recover_checkpoint_leftovers(dir.string()).empty());  // nothing left to do
}


// ---- resume follows `latest` ----

// After a rollback (resumed from step_4 by path, then step_6 written) a start with resume = "auto"
// continues from step_6, which `latest` names, not from the abandoned step_8. Fails on the old
// code: it took the run's highest verifying step, step_8.
TEST_F(Recovery, AutoFollowsLatestAfterARollback) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    for (int s : {2, 4, 8}) save(L, s, 0, p, m, v);
    const std::string six = save(L, 6, 0, p, m, v);  // the rolled-back run's next checkpoint
    ASSERT_EQ(slurp(ck() / "latest"), "step_6\n");
    ResumeChoice c = resolve_resume("auto", dir.string(), false);
    EXPECT_EQ(c.dir, six);
    EXPECT_EQ(c.run_id, "run-a");
    ASSERT_EQ(c.skipped.size(), 1u);
    EXPECT_EQ(c.skipped[0], "skipped step_8: newer than step_6, which checkpoints/latest names (the checkpoint "
                            "written last)");
    EXPECT_EQ(find_resume_checkpoint(dir.string()).dir, six);

    // `latest` not followed, each time said first: then the newest of the run that verifies (step_8).
    const std::string eight = (ck() / "step_8").string();
    auto expect_fallback = [&](const std::string& why) {
        const ResumeChoice f = resolve_resume("auto", dir.string(), false);
        EXPECT_EQ(f.dir, eight) << why;
        ASSERT_FALSE(f.skipped.empty()) << why;
        EXPECT_EQ(f.skipped[0].rfind("checkpoint: " + why, 0), 0u) << f.skipped[0];
        EXPECT_NE(f.skipped[0].find("; taking the newest checkpoint of the run that verifies"), std::string::npos)
            << f.skipped[0];
    };
    spit(ck() / "latest", "step_10\n");
    expect_fallback("checkpoints/latest names step_10, which does not verify (it does not exist)");
    spit(ck() / "latest", "model.h5\n");
    expect_fallback("checkpoints/latest names 'model.h5', not a step_<N>");
    fs::remove(ck() / "latest");
    expect_fallback("checkpoints/latest is missing or empty");
    spit(ck() / "latest", "step_6\n");
    flip_byte(fs::path(six) / "optim_0.h5", 700);
    expect_fallback("checkpoints/latest names step_6, which does not verify (optim_0.h5: SHA-256 differs");
}

// ---- a crash inside pruning ----

// The process dies (SIGKILL) in the middle of deleting a pruned checkpoint. Nothing it leaves may
// stand in the way of the next start: no step_<N> is half removed (every one left verifies), the
// half-deleted .del_step_<N> is tidied by start-up recovery, resume takes `latest`, and the next
// checkpoint prunes as usual. Fails on the old code: it deleted step_2 in place, leaving a
// step_2 that does not verify.
TEST_F(Recovery, ACrashInsidePruningBlocksNothing) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    for (int s : {2, 4}) save(L, s, 0, p, m, v);
    const std::vector<std::string> complete = names_in(ck() / "step_2");  // model.h5, optim_0.h5, state.toml
    ASSERT_EQ(complete.size(), 3u);
    EXPECT_EXIT(
        {
            inject::kill_under = ".del_step_";
            save(L, 6, 1, p, m, v);  // keep_last 1: prunes step_2 and step_4
            std::exit(0);            // not reached when the crash came
        },
        ::testing::KilledBySignal(SIGKILL), "");
    EXPECT_EQ(slurp(ck() / "latest"), "step_6\n");
    int half = 0;
    for (const std::string& n : names_in(ck())) {
        if (n.rfind("step_", 0) == 0) {
            EXPECT_EQ(checkpoint_problem((ck() / n).string()), "") << n;
        }
        if (n.rfind(".del_step_", 0) == 0 && names_in(ck() / n).size() < complete.size()) ++half;
    }
    EXPECT_EQ(half, 1) << "the crash did not come in the middle of a deletion";

    const auto notes = recover_checkpoint_leftovers(dir.string());
    ASSERT_FALSE(notes.empty());
    for (const auto& n : notes) EXPECT_NE(n.find("(left by interrupted pruning)"), std::string::npos) << n;
    for (const std::string& n : names_in(ck())) EXPECT_NE(n.rfind(".del_", 0), 0u) << n;
    const ResumeChoice c = resolve_resume("auto", dir.string(), false);
    EXPECT_EQ(c.dir, (ck() / "step_6").string());
    save(L, 8, 1, p, m, v);
    std::vector<std::string> steps;
    for (const std::string& n : names_in(ck()))
        if (n.rfind("step_", 0) == 0) steps.push_back(n);
    EXPECT_EQ(steps, std::vector<std::string>{"step_8"});
}

// Half-removed step directories as a crash inside an older version's pruning left them (deleted
// in place, in directory order): one without its state.toml, one with it but without model.h5.
// Neither stops a start: resume takes `latest` (also with `latest` lost: the newest that
// verifies), recovery leaves them (they are not known to be leftovers), and the next checkpoint
// prunes the one whose state.toml says it is this run's.
TEST_F(Recovery, HalfRemovedStepDirectoriesAreIgnored) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    for (int s : {2, 3, 4}) save(L, s, 0, p, m, v);
    fs::remove(ck() / "step_2" / "state.toml");
    fs::remove(ck() / "step_3" / "model.h5");
    EXPECT_TRUE(recover_checkpoint_leftovers(dir.string()).empty());
    ResumeChoice c = resolve_resume("auto", dir.string(), false);
    EXPECT_EQ(c.dir, (ck() / "step_4").string());
    EXPECT_TRUE(c.skipped.empty());
    fs::remove(ck() / "latest");
    c = resolve_resume("auto", dir.string(), false);
    EXPECT_EQ(c.dir, (ck() / "step_4").string());
    save(L, 5, 2, p, m, v);  // keeps 5 and 4; prunes 3 (this run's); 2 cannot be read: never pruned
    EXPECT_EQ(names_in(ck()), (std::vector<std::string>{"latest", "step_2", "step_4", "step_5"}));
    EXPECT_EQ(resolve_resume("auto", dir.string(), false).dir, (ck() / "step_5").string());
}

// ---- the OS failing under the protocol ----

// checkpoints/ made in a fresh run dir: its entry in run_dir is made durable (run_dir fsynced
// after checkpoints/ exists), and so is run_dir's own entry in its parent. Fails on the old code:
// create_directories without any fsync.
TEST_F(Recovery, RunDirIsFsyncedAfterCheckpointsIsMade) {
    const fs::path run = dir / "run";
    {
        std::lock_guard<std::mutex> lk(inject::mu);
        inject::record = true;
    }
    begin_checkpoint(run.string(), 1);
    std::vector<std::pair<std::string, bool>> got;
    {
        std::lock_guard<std::mutex> lk(inject::mu);
        inject::record = false;
        got = inject::fsynced;
    }
    const auto synced = [&](const fs::path& p, bool with_checkpoints) {
        return std::count(got.begin(), got.end(), std::make_pair(fs::canonical(p).string(), with_checkpoints)) > 0;
    };
    EXPECT_TRUE(synced(run, true)) << "run_dir not fsynced after checkpoints/ was made";
    EXPECT_TRUE(synced(dir, false)) << "the run dir's parent not fsynced after run_dir was made";
    EXPECT_TRUE(fs::is_directory(run / "checkpoints" / ".tmp_step_1"));
}

// checkpoints/ cannot be listed (readdir: EIO): the commit fails before `latest` moves or
// anything is pruned, and resume lookup and recovery fail rather than seeing no checkpoint.
// Fails on the old code: the listing's error was ignored, so the commit published step_6 and
// pruned nothing, and "auto" with an unreadable checkpoints/ started from scratch.
TEST_F(Recovery, AListingErrorFailsBeforeLatestMoves) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string two = save(L, 2, 0, p, m, v), four = save(L, 4, 0, p, m, v);
    inject::fail_readdir = fs::canonical(ck()).string();
    const std::string want = "cannot list '" + ck().string() + "': " + std::strerror(EIO);
    try {
        save(L, 6, 1, p, m, v);
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    for (const auto& look : std::vector<std::function<void()>>{
             [&] { resolve_resume("auto", dir.string(), false); },
             [&] { recover_checkpoint_leftovers(dir.string()); }}) {
        try {
            look();
            ADD_FAILURE() << "expected CheckpointError";
        } catch (const CheckpointError& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        }
    }
    inject::fail_readdir.clear();
    EXPECT_EQ(slurp(ck() / "latest"), "step_4\n");
    EXPECT_EQ(names_in(ck()), (std::vector<std::string>{"latest", "step_2", "step_4"}));
    EXPECT_EQ(checkpoint_problem(two), "");
    EXPECT_EQ(checkpoint_problem(four), "");
}
