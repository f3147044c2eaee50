// tests/parallel/test_host_wait.cpp — the timed host wait's logic (parallel/host_wait.hpp) with a
// scripted Comm, independent of NCCL: the deadline (the largest host_timeout_s of the comms named),
// the abort of every registered comm (named or not) when it passes, an async error, and an error
// of the polled work that is not the watchdog's. Times: a wait of 0.2 s must end within [0.2, 5) s
// (5 s: a loaded 2-core machine; a wait without the watchdog never ends: ctest's TIMEOUT). The NCCL
// side runs under the emulator: nccl_comm_hung_np2 and cuda_emu_hung. One process, no MPI.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>

#include "parallel/host_wait.hpp"

namespace llmtrain {
namespace {

/// A Comm whose host-wait hooks are scripted; its operations are never called here.
class ScriptedComm final : public Comm {
public:
    ScriptedComm(std::vector<int> ranks, double timeout) : ranks_(std::move(ranks)), timeout_(timeout) {}
    int rank() const override { return 0; }
    int size() const override { return int(ranks_.size()); }
    const std::vector<int>& world_ranks() const override { return ranks_; }
    CommHandle all_reduce_sum_async(void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle reduce_scatter_sum_async(const void*, void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle all_gather_async(const void*, void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle broadcast_async(void*, size_t, DType, int) override { throw std::logic_error("unused"); }
    CommHandle send_async(const void*, size_t, DType, int) override { throw std::logic_error("unused"); }
    CommHandle recv_async(void*, size_t, DType, int) override { throw std::logic_error("unused"); }
    void all_reduce_max(float*, size_t) override { throw std::logic_error("unused"); }
    void barrier() override { throw std::logic_error("unused"); }

    std::string async_error() override { return error; }
    void abort() override { aborted = true; }
    double host_timeout_s() const override { return timeout_; }

    std::string error;  ///< what async_error() answers
    std::atomic<bool> aborted{false};

private:
    std::vector<int> ranks_;
    double timeout_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(HostWait, DeadlineAbortsEveryRegisteredCommAndNamesTheGroups) {
    ScriptedComm zero({0, 1}, 0.2), replicas({0, 2}, 0.1), link({0, 3}, 0.0);
    register_abortable(&zero);
    register_abortable(&link);  // registered, not named: aborted and listed all the same
    const auto t0 = std::chrono::steady_clock::now();
    try {
        poll_with_watchdog([&] { return zero.aborted.load(); },  // "the hung work ends once aborted"
                           {{&zero, "zero group"}, {&replicas, "replica group"}}, "reading the gradient norm");
        ADD_FAILURE() << "the wait returned";
    } catch (const CommError& e) {
        const std::string m = e.what();
        EXPECT_EQ(m.rfind("reading the gradient norm: timed out after 0.2 s waiting for the GPU; ", 0), 0u) << m;
        EXPECT_NE(m.find("zero group (world ranks [0, 1]); replica group (world ranks [0, 2]); "
                         "another communicator (world ranks [0, 3]); called ncclCommAbort"),
                  std::string::npos)
            << m;
    }
    const double waited = seconds_since(t0);
    EXPECT_GE(waited, 0.2);  // the largest timeout of the comms named
    EXPECT_LT(waited, 5.0);
    EXPECT_TRUE(zero.aborted);
    EXPECT_TRUE(link.aborted);
    EXPECT_FALSE(replicas.aborted);  // not registered (an MpiComm, say)
    unregister_abortable(&zero);
    unregister_abortable(&link);
}

TEST(HostWait, AsyncErrorAbortsAndNamesTheFailedGroup) {
    ScriptedComm zero({0, 1}, 0.0), other({0, 2}, 0.0);  // no deadline: the error ends the wait
    register_abortable(&zero);
    register_abortable(&other);
    int polls = 0;
    zero.error = "remote process exited or there was a network error";
    try {
        poll_with_watchdog([&] { return ++polls > 1000000; }, {{&zero, "zero group"}}, "reading the losses");
        ADD_FAILURE() << "the wait returned";
    } catch (const CommError& e) {
        EXPECT_NE(std::string(e.what()).find("reading the losses: zero group (world ranks [0, 1]) failed: remote "
                                             "process exited"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(polls, 1);
    EXPECT_TRUE(zero.aborted);
    EXPECT_TRUE(other.aborted);
    unregister_abortable(&zero);
    unregister_abortable(&other);
}

TEST(HostWait, CompletedWorkAndForeignErrorsPassThrough) {
    ScriptedComm zero({0, 1}, 5.0);
    register_abortable(&zero);
    int polls = 0;
    poll_with_watchdog([&] { return ++polls == 3; }, {{&zero, "zero group"}}, "x");  // done before the deadline
    EXPECT_EQ(polls, 3);
    EXPECT_THROW(poll_with_watchdog([]() -> bool { throw std::runtime_error("device fault"); },
                                    {{&zero, "zero group"}}, "x"),
                 std::runtime_error);  // not a CommError: the watchdog did not fire
    EXPECT_FALSE(zero.aborted);
    unregister_abortable(&zero);
}

}  // namespace
}  // namespace llmtrain
