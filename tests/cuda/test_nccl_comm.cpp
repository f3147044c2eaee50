// tests/cuda/test_nccl_comm.cpp — NcclComm (parallel/nccl_comm.cpp) on the CUDA backend: under
// cuda_emu, run by mpirun with 2 and 3 ranks (tests/cuda/CMakeLists.txt), and in test_cuda_gpu on a GPU.
//
// The contract every Comm keeps is one suite, CommContract (tests/comm/comm_contract.hpp, its
// tolerances there: real NCCL adds in an order of its own and rounds bf16 each step), instantiated
// here for NcclComm with device buffers of the cuda backend. Under the emulator its sums are the
// rank-order sums bit for bit, and its byte counters must equal the bytes the emulated NCCL handed
// MPI for other ranks (emu::nccl::bytes_sent). Here besides: the cpu backend refused, and the
// hung-peer cases (ctest nccl_comm_hung_np2): waits that end in CommError after timeout_s.
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/backend.hpp"
#include "parallel/comm.hpp"
#include "tests/comm/comm_contract.hpp"

#include "parallel/host_wait.hpp"
#include "parallel/zero.hpp"

#ifndef LLMTRAIN_REAL_GPU
#include "emu/nccl_comm.hpp"  // emu::nccl::bytes_sent
#endif

namespace llmtrain {
namespace {

// (test_cuda_gpu: MPI started here when no contract case has started it yet)
int wrank() { return commtest::start_mpi() ? world_rank() : 0; }
int wsize() { return commtest::start_mpi() ? world_size() : 1; }

commtest::CommKind nccl_comm_kind() {
    auto make = [](Ops& ops, const std::vector<int>& ranks, const CommOptions& opt) {
        auto comm = make_nccl_comm(ops, ranks, opt);
        if (!comm) throw std::runtime_error("make_nccl_comm: no NcclComm linked into this executable");
        return comm;
    };
    commtest::CommKind k{"NcclComm", "cuda", {"fp32", "bf16"}, make,
                         {.rank_order_sums = true,  // the emulated NCCL adds in rank order and rounds once
                          .serial_p2p = true,       // one stream: sends and receives run in the order issued
                          .describe_prefix = "NcclComm on ",
                          .host_timeout = true,
                          .aborts = true},  // ncclCommAbort
                         {}};
#ifdef LLMTRAIN_REAL_GPU
    k.traits.rank_order_sums = false;  // NCCL's own order, bf16 rounded each step: the tolerance
#else
    k.wire_bytes = [](CommOp op) -> uint64_t {  // what the emulated NCCL handed MPI for other ranks
        using emu::nccl::Kind;
        const Kind kinds[] = {Kind::all_reduce, Kind::reduce_scatter, Kind::all_gather, Kind::broadcast, Kind::send};
        return op < CommOp::recv ? emu::nccl::bytes_sent(kinds[int(op)]) : 0;
    };
#endif
    return k;
}

TEST(NcclComm, RefusesTheCpuBackend) {
    commtest::start_mpi();  // make_nccl_comm checks for MPI first
    auto cpu = make_backend("cpu", "fp32");
    EXPECT_THROW(make_nccl_comm(*cpu), std::invalid_argument);
}

/// The hung cases' comms: the pair {0, 1} with `timeout_s`, and a one-rank comm of each rank (a
/// second comm of the wait, in a role of its own).
struct HungPair {
    std::unique_ptr<Ops> ops = make_backend("cuda", "fp32");
    std::unique_ptr<Comm> pair, solo;
    explicit HungPair(double timeout_s) {
        CommOptions opt;
        opt.timeout_s = timeout_s;
        pair = make_nccl_comm(*ops, {0, 1}, opt);
        solo = make_nccl_comm(*ops, {wrank()}, opt);
    }
};

/// Runs `wait`, which must end in CommError, expects each of `parts` in its message and returns the
/// seconds it took.
template <class Wait>
double expect_comm_error(Wait wait, const std::vector<std::string>& parts) {
    const auto start = std::chrono::steady_clock::now();
    try {
        wait();
        ADD_FAILURE() << "the wait returned although rank 1 never posted";
    } catch (const CommError& e) {
        const std::string msg = e.what();
        for (const std::string& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << part << " in " << msg;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A collective that never completes (rank 0 receives from rank 1, which never sends) ends in a
// CommError naming the operation and the group once timeout_s has passed, instead of hanging.
// Runs alone (ctest nccl_comm_hung_np2), with the other hung cases: each leaves an abandoned MPI
// request behind. The aborted operation is no device error (the stream goes on), so each test
// frees what it made through the backend.
TEST(NcclCommHung, HostWaitTimesOutAndAborts) {
    if (wsize() < 2) GTEST_SKIP() << "needs 2 ranks";
    HungPair h(0.5);
    if (wrank() != 0) return;
    void* buf = h.ops->malloc(64);
    h.pair->recv_async(buf, 16, DType::f32, 1)->wait();
    const double waited = expect_comm_error([&] { h.pair->barrier(); },  // rank 1 never sends
                                            {"timed out", "recv", "world ranks [0, 1]", "ncclCommAbort"});
    EXPECT_GE(waited, 0.5);
    EXPECT_LT(waited, 30.0);
    EXPECT_THROW(h.pair->all_reduce_sum_async(buf, 16, DType::f32), CommError);  // aborted for good
    h.pair.reset();
    h.ops->free(buf);
}

// The training path's host wait (HostWait, as ZeroEngine's gradient-norm read uses it) on an
// all-reduce that rank 1 never posts: rank 0 gets a CommError naming the operation, the group and
// its newest operation once timeout_s has passed, instead of hanging in the CUDA runtime. With a
// plain synchronize in its place the test hangs, and ctest's TIMEOUT fails it. Runs alone
// (nccl_comm_hung_np2).
TEST(NcclCommHung, TrainingHostWaitTimesOutNamingTheOpAndGroup) {
    if (wsize() < 2) GTEST_SKIP() << "needs 2 ranks";
    HungPair h(1.0);
    if (wrank() != 0) return;  // rank 1 never posts the all-reduce
    Ops& ops = *h.ops;
    float* dev = static_cast<float*>(ops.malloc(sizeof(float)));
    float* host = static_cast<float*>(ops.malloc_host(sizeof(float)));
    ops.memset(dev, 0, sizeof(float));
    h.pair->all_reduce_sum(dev, 1, DType::f32);
    ops.memcpy_d2h(host, dev, sizeof(float));
    HostWait host_wait(ops);
    const double waited = expect_comm_error(
        [&] { host_wait("reading the gradient norm", {{h.pair.get(), "zero group"}, {h.solo.get(), "replica group"}}); },
        {"reading the gradient norm: timed out after 1 s",
         "zero group (NcclComm on world ranks [0, 1], newest operation all_reduce (1 issued))",
         "replica group (NcclComm on world ranks [0]", "ncclCommAbort"});
    EXPECT_GE(waited, 1.0);
    EXPECT_LT(waited, 30.0);
    EXPECT_THROW(h.pair->all_reduce_sum_async(dev, 1, DType::f32), CommError);  // aborted, both of them
    EXPECT_THROW(h.solo->all_reduce_sum_async(dev, 1, DType::f32), CommError);
    h.pair.reset();
    h.solo.reset();
    ops.free(dev);
    ops.free_host(host);
}

// The ZeRO engine's wait for the model's value (ParamStore::host_wait, the loss read of
// GPT::forward_backward) is timed too: at stage 2 a unit's gradient reduce-scatter starts in
// grads_done, and rank 1 never posts it. Rank 0 gets CommError naming the wait, the zero group and
// its newest operation.
TEST(NcclCommHung, ZeroEngineHostWaitTimesOut) {
    if (wsize() < 2) GTEST_SKIP() << "needs 2 ranks";
    HungPair h(1.0);
    if (wrank() != 0) return;  // rank 1 never posts the reduce-scatter
    GPTConfig cfg;
    cfg.n_layer = 1, cfg.n_head = 1, cfg.n_embd = 8, cfg.seq_len = 4, cfg.vocab_size = 16;
    const ParamLayout layout(cfg, 2);
    {
        Allocator alloc(*h.ops);
        ZeroOptions zo;
        zo.stage = 2;
        ZeroEngine engine(alloc, layout, *h.pair, *h.solo, zo);
        engine.begin_step();
        engine.acquire_grads(1);
        engine.grads_done(1);  // the reduce-scatter starts; reduce_grads makes the stream wait for it
        engine.reduce_grads();
        Event e = h.ops->create_event();
        h.ops->record_event(e);
        const double waited = expect_comm_error(
            [&] { engine.host_wait(*h.ops, e, "reading the loss"); },
            {"reading the loss: timed out after 1 s",
             "zero group (NcclComm on world ranks [0, 1], newest operation reduce_scatter (1 issued))"});
        EXPECT_LT(waited, 30.0);
        h.ops->destroy_event(e);
    }
    h.pair.reset();
    h.solo.reset();
}

}  // namespace

namespace commtest {
INSTANTIATE_TEST_SUITE_P(NcclComm, CommContract, ::testing::Values(nccl_comm_kind()), kind_suffix);
}  // namespace commtest
}  // namespace llmtrain
