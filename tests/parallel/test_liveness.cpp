// tests/parallel/test_liveness.cpp — the liveness probe and waiting knowingly on a busy rank
// (parallel/nodes.hpp: BusyPhase, run_busy, probe_peers, OverdueWait through MpiComm's wait), under
// `mpirun -np 3` with parallel.timeout_s = 1 for the waiting ranks. References are the scripted
// behaviour of each rank: how long a rank sleeps or stays busy, which rank is stopped, and the
// messages docs/multinode.md "While one rank works alone" promises.
//  - a pong carries the newest phase, its time left and limit; a late pong of an earlier probe is
//    dropped, never taken for the next probe's answer;
//  - rank 0 busy 3.5 s (run_busy, limit 20 s): rank 1 waits for it in a collective past the 1 s
//    limit, rank 2 waits for rank 1 in a receive (a chained wait): both complete, each says why once
//    per extension on stderr;
//  - rank 0 busy past its 1.5 s limit: rank 1's wait fails naming the phase and the limit;
//  - rank 2 stopped (SIGSTOP) while rank 0 is busy: rank 1's wait fails within timeout_s + the
//    probe naming rank 2, as it would without the busy rank; rank 1 then lets rank 2 go on;
//  - rank 2 killed (SIGKILL) while rank 0 is busy: the job ends in time (liveness_killed.sh).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/nodes.hpp"

using namespace llmtrain;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// Every rank meets here with no time limit (the end of each test).
void meet() { make_mpi_comm({}, CommOptions{0})->barrier(); }

}  // namespace

TEST(Liveness, APongCarriesTheNewestBusyPhase) {
    if (world_size() != 3) GTEST_SKIP() << "needs 3 ranks";
    const int me = world_rank();
    auto world = make_mpi_comm({}, CommOptions{0});
    if (me == 0) {
        BusyPhase outer("outer phase", 30);
        {
            BusyPhase inner("inner phase " + std::string(200, 'x'), 10);
            world->barrier();  // rank 1 probes while this waits (and answers)
        }
        int token = 0;
        world->send(&token, 1, DType::f32, 1);  // the inner phase has ended
        world->barrier();
    } else if (me == 1) {
        auto a = probe_peers({0, 1, 2}, 5);  // rank 2 waits in the barrier: alive, not busy
        ASSERT_EQ(a.size(), 2u);
        EXPECT_EQ(a[0].rank, 0);
        EXPECT_TRUE(a[0].answered && a[0].busy);
        EXPECT_EQ(a[0].phase, "inner phase " + std::string(120 - 12, 'x')) << "cut to 120 bytes";
        EXPECT_GT(a[0].seconds_left, 8.0);
        EXPECT_LE(a[0].seconds_left, 10.0);
        EXPECT_EQ(a[0].limit_s, 10.0);
        EXPECT_EQ(a[0].origin, 0);
        EXPECT_TRUE(a[1].answered);
        EXPECT_FALSE(a[1].busy);
        world->barrier();
        int token = 0;
        world->recv(&token, 1, DType::f32, 0);
        a = probe_peers({0}, 5);
        ASSERT_EQ(a.size(), 1u);
        EXPECT_EQ(a[0].phase, "outer phase") << "the inner phase ended: the outer one answers";
        EXPECT_EQ(a[0].limit_s, 30.0);
        world->barrier();
    } else {
        world->barrier();
        world->barrier();
    }
    world->barrier();
    EXPECT_THROW(BusyPhase("no time", 0), std::invalid_argument);
}

// Rank 1 makes no MPI call for 1 s, so rank 0's first probe gets no answer; then it answers that
// stale ping and sleeps again. Rank 0's next probe must not take the stale answer for its own.
TEST(Liveness, ALatePongIsNotTakenForTheNextProbes) {
    if (world_size() != 3) GTEST_SKIP() << "needs 3 ranks";
    const int me = world_rank();
    auto pair = me < 2 ? make_mpi_comm({0, 1}, CommOptions{0}) : nullptr;
    int token = 0;
    if (me == 0) {
        EXPECT_EQ(unanswered({1}, 0.3), std::vector<int>{1});
        pair->recv(&token, 1, DType::f32, 1);  // rank 1 has answered the first ping
        EXPECT_EQ(unanswered({1}, 0.5), std::vector<int>{1}) << "the late answer to the first probe was taken";
    } else if (me == 1) {
        sleep_s(1.0);
        const auto t0 = Clock::now();
        while (since(t0) < 0.05) serve_liveness();  // answers the stale ping
        pair->send(&token, 1, DType::f32, 0);
        sleep_s(1.0);  // silent again through rank 0's second probe
    }
    meet();
}

TEST(BusyWait, AWaitOutlastsTheTimeoutWhileAPeerIsBusyAndChains) {
    if (world_size() != 3) GTEST_SKIP() << "needs 3 ranks";
    const int me = world_rank();
    const CommOptions limited{1.0};
    auto c01 = me <= 1 ? make_mpi_comm({0, 1}, limited) : nullptr;
    auto c12 = me >= 1 ? make_mpi_comm({1, 2}, limited) : nullptr;
    float v = float(me);
    const auto t0 = Clock::now();
    if (me == 0) {
        run_busy("committing step_5", 20, [] { sleep_s(3.5); });
        EXPECT_GE(since(t0), 3.5);
        c01->all_reduce_max(&v, 1);
    } else if (me == 1) {
        testing::internal::CaptureStderr();
        EXPECT_NO_THROW(c01->all_reduce_max(&v, 1));
        const std::string err = testing::internal::GetCapturedStderr();
        std::printf("rank 1: the wait completed after %.2f s\n%s", since(t0), err.c_str());
        EXPECT_GE(since(t0), 3.0);
        EXPECT_EQ(v, 1.0f);
        EXPECT_TRUE(has(err, "llmtrain: rank 1: all_reduce_max of 1 fp32 elements on world ranks [0,1] waits past "
                             "parallel.timeout_s = 1 for rank 0 (alive, busy: committing step_5; up to "))
            << err;
        c12->send(&v, 1, DType::f32, 1);
    } else {
        testing::internal::CaptureStderr();
        EXPECT_NO_THROW(c12->recv(&v, 1, DType::f32, 0));
        const std::string err = testing::internal::GetCapturedStderr();
        std::printf("rank 2: the wait completed after %.2f s\n%s", since(t0), err.c_str());
        EXPECT_GE(since(t0), 3.0);
        EXPECT_EQ(v, 1.0f);
        EXPECT_TRUE(has(err, "llmtrain: rank 2: recv of 1 fp32 elements from world rank 1 (group world ranks [1,2]) "
                             "waits past parallel.timeout_s = 1 for rank 1 (alive, busy: waiting for rank 0: "
                             "committing step_5; up to "))
            << err;
    }
    meet();
}

TEST(BusyWait, APhasePastItsLimitFailsNamingItAndTheLimit) {
    if (world_size() != 3) GTEST_SKIP() << "needs 3 ranks";
    const int me = world_rank();
    auto c01 = me <= 1 ? make_mpi_comm({0, 1}, CommOptions{me == 0 ? 0.0 : 1.0}) : nullptr;
    static float v;  // rank 1 abandons its operation: MPI may write v until the job ends
    v = float(me);
    if (me == 0) {
        run_busy("verifying step_3", 1.5, [] { sleep_s(4); });
        c01->all_reduce_max(&v, 1);  // meets rank 1's abandoned operation
    } else if (me == 1) {
        const auto t0 = Clock::now();
        std::string msg;
        try {
            c01->all_reduce_max(&v, 1);
            ADD_FAILURE() << "no CommError";
        } catch (const CommError& e) {
            msg = e.what();
        }
        std::printf("rank 1: the wait failed after %.2f s\n", since(t0));  // docs/multinode.md's figure
        EXPECT_GE(since(t0), 1.4) << msg;
        EXPECT_LE(since(t0), 3.5) << msg;
        EXPECT_TRUE(has(msg, "all_reduce_max of 1 fp32 elements on world ranks [0,1] did not complete within "
                             "parallel.timeout_s = 1 s; waiting for world ranks [0,1]; rank 0 on node 0 ("))
            << msg;
        EXPECT_TRUE(has(msg, ") answered a liveness ping still busy (verifying step_3) past its limit of 1.5 s"))
            << msg;
    }
    meet();
}

TEST(BusyWait, AStoppedRankEndsTheWaitWhileAnotherIsBusy) {
    if (world_size() != 3) GTEST_SKIP() << "needs 3 ranks";
    const int me = world_rank();
    auto world = make_mpi_comm({}, CommOptions{me == 1 ? 1.0 : 0.0});
    std::vector<int> pids(3);
    const int mine = int(getpid());
    world->all_gather(&mine, pids.data(), sizeof(int), DType::u8);
    static float v;  // rank 1 abandons its operation
    v = float(me);
    if (me == 0) {
        run_busy("committing step_7", 30, [] { sleep_s(4); });
        world->all_reduce_max(&v, 1);
    } else if (me == 2) {
        raise(SIGSTOP);  // rank 1 sends SIGCONT once its wait has failed
        world->all_reduce_max(&v, 1);
    } else {
        const auto t0 = Clock::now();
        std::string msg;
        try {
            world->all_reduce_max(&v, 1);
            ADD_FAILURE() << "no CommError";
        } catch (const CommError& e) {
            msg = e.what();
        }
        const double took = since(t0);
        kill(pid_t(pids[2]), SIGCONT);
        std::printf("rank 1: the wait failed after %.2f s\n", took);  // docs/multinode.md's figure
        EXPECT_GE(took, 1.0) << msg;
        EXPECT_LE(took, 1.0 + 0.5 + 1.0) << "timeout_s + the probe + 1 s: " << msg;
        EXPECT_TRUE(has(msg, "all_reduce_max of 1 fp32 elements on world ranks [0,1,2] did not complete within "
                             "parallel.timeout_s = 1 s; waiting for world ranks [0,1,2]; no answer to a liveness "
                             "ping within 0.5 s from rank 2 on node 0 ("))
            << msg;
    }
    meet();
}

// Run only by tests/parallel/liveness_killed.sh (LLMTRAIN_TEST_KILL=1), which times the whole job:
// rank 2 is killed (SIGKILL) while rank 0 is busy for 20 s and rank 1 waits for both. The job must
// end within timeout_s + a few seconds, by mpirun noticing the death or by rank 1's error (which
// ends the job as the trainer does, with mpi_abort), not when rank 0's phase ends.
TEST(BusyWait, AKilledRankEndsTheJobWhileAnotherIsBusy) {
    if (world_size() != 3 || !std::getenv("LLMTRAIN_TEST_KILL")) GTEST_SKIP() << "run by liveness_killed.sh";
    const int me = world_rank();
    auto world = make_mpi_comm({}, CommOptions{1.0});
    float v = float(me);
    if (me == 0) run_busy("committing step_9", 20, [] { sleep_s(20); });
    if (me == 2) {
        sleep_s(0.5);
        raise(SIGKILL);
    }
    try {
        world->all_reduce_max(&v, 1);
    } catch (const CommError& e) {
        std::fprintf(stderr, "llmtrain: error: %s\n", e.what());
        mpi_abort(1);
    }
}
