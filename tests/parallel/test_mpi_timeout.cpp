// tests/parallel/test_mpi_timeout.cpp — MpiComm's wait gives up after parallel.timeout_s.
//
// Run under `mpirun -np 2`. Rank 1 plays a hung peer: it sleeps 4 s before it joins anything (and
// so answers no liveness ping, parallel/nodes.hpp). Rank 0, with timeout_s = 0.5, must get a
// CommError from each wait within 0.4..2 s (the limit plus the 0.5 s liveness probe) whose message
// names the operation, the ranks it waits for, the limit and rank 1 with its node as the one that
// did not answer. Then both ranks meet on a second Comm with no limit (timeout_s = 0), which must
// wait the remaining ~1 s without throwing; the late operations of rank 1 complete while rank 0
// waits there, so the job ends cleanly.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm.hpp"

using namespace llmtrain;

namespace {

using Clock = std::chrono::steady_clock;

/// Runs f, which must throw CommError after 0.4..2 s; returns its message.
template <class F>
std::string timed_out_message(F&& f) {
    const auto t0 = Clock::now();
    std::string msg;
    try {
        f();
        ADD_FAILURE() << "no CommError";
    } catch (const CommError& e) {
        msg = e.what();
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_GE(s, 0.4) << msg;
    EXPECT_LE(s, 2.0) << msg;
    return msg;
}

}  // namespace

TEST(MpiCommTimeout, AWaitOnAHungRankThrowsNamingTheOperationAndRanks) {
    if (world_size() != 2) GTEST_SKIP() << "needs exactly 2 ranks";
    const int me = world_rank();
    auto limited = make_mpi_comm({}, CommOptions{me == 0 ? 0.5 : 30.0});
    auto unlimited = make_mpi_comm({}, CommOptions{0});
    // Rank 0 abandons these operations; MPI may use their buffers until the job ends.
    static std::vector<float> recv_buf(10), gathered(2 * 1234), mine(1234, 1.0f);
    if (me == 0) {
        const auto t0 = Clock::now();
        std::string m = timed_out_message([&] { limited->recv(recv_buf.data(), 10, DType::f32, 1); });
        EXPECT_NE(m.find("recv of 10 fp32 elements from world rank 1"), std::string::npos) << m;
        EXPECT_NE(m.find("did not complete within parallel.timeout_s = 0.5 s; waiting for world rank 1; no answer to "
                         "a liveness ping within 0.5 s from rank 1 on node 0 ("),
                  std::string::npos)
            << m;
        auto h = limited->all_gather_async(mine.data(), gathered.data(), 1234, DType::f32);
        m = timed_out_message([&] { h->wait(); });
        EXPECT_NE(m.find("all_gather of 1234 fp32 elements per rank on world ranks [0,1] did not complete within "
                         "parallel.timeout_s = 0.5 s; waiting for world ranks [0,1]; no answer to a liveness ping "
                         "within 0.5 s from rank 1 on node 0 ("),
                  std::string::npos)
            << m;
        const auto t1 = Clock::now();
        EXPECT_THROW(h->wait(), CommError);
        EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 0.1) << "a second wait rethrows at once";
        m = timed_out_message([&] { limited->barrier(); });
        EXPECT_NE(m.find("barrier on world ranks [0,1] did not complete"), std::string::npos) << m;
        EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.8) << "rank 1 is still asleep";
    } else {
        std::this_thread::sleep_for(std::chrono::seconds(4));
        float v[10] = {};
        limited->send(v, 10, DType::f32, 0);
        limited->all_gather(mine.data(), gathered.data(), 1234, DType::f32);
        limited->barrier();
    }
    unlimited->barrier();
}
