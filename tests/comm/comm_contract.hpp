// tests/comm/comm_contract.hpp — the contract every Comm keeps (parallel/comm.hpp) as one
// value-parameterised GoogleTest suite, CommContract. Its cases are in tests/comm/comm_contract.cpp
// (results: sums, moves, segments) and tests/comm/comm_contract_flow.cpp (handles, rings, groups,
// counters, max, barrier, abort, refused arguments); each binary that can build a Comm instantiates
// them for it with a CommKind:
//   MpiComm      tests/parallel/test_mpi_comm.cpp    cpu backend, plain and mpirun -np 3 / 4
//   NcclComm     tests/cuda/test_nccl_comm.cpp       cuda_emu under mpirun -np 2 / 3; test_cuda_gpu
//   MpiCudaComm  tests/cuda/test_mpi_cuda_comm.cpp   cuda_emu under mpirun -np 2 / 3; test_cuda_gpu
// Why one suite: the same checks were written three times, once per Comm, and had drifted (sizes,
// dtypes, in-place forms, u8 moves covered for one Comm and not another). What may differ between
// Comms is stated once, in CommTraits; tests that are not contract (timeouts on a hung peer, staging
// buffers, local-rank rules, operation names) stay in the per-Comm files.
//
// References are computed locally: every rank regenerates every rank's input from a seeded generator
// (input_bytes: mixed signs and magnitudes, so the summation order matters), so the expected result
// is known without communication:
//  - sums: element i within tol · Σ_r |x_r,i| of the rank-order fp32 sum (for bf16 that sum rounded
//    once to nearest-even, the rounding done here by comparing the two neighbouring bf16 values in
//    double), tol = 1e-6 for fp32 (P − 1 ≤ 3 roundings of 2^-24) and P · 2^-8 for bf16 (up to P
//    roundings of half a bf16 ulp, 2^-8 relative, of partial sums bounded by Σ|x|): real NCCL, which
//    adds in another order and rounds bf16 each step, meets it. A Comm with
//    CommTraits::rank_order_sums must equal the rank-order sum bit for bit. fp32 sums must also be
//    within 1e-6 · Σ|x| of the double-precision sum.
//  - moves (all-gather, broadcast, send/recv) and max deliver the source bits exactly;
//  - byte counters equal the CommStats formulas (and, where the transport can tell, its own count).
// Buffers are the backend's memory. Uploads are queued on the current stream without synchronizing
// and results read after further queued work, so a missing event wait or a buffer reused too early
// shows as wrong bits under the emulator's deferred streams (NaN-filled device-to-host copies).
// Checks after collectives are EXPECTs, so every rank issues the same sequence of operations.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/ops.hpp"
#include "parallel/comm.hpp"

namespace llmtrain::commtest {

using Bytes = std::vector<uint8_t>;

/// Where Comms may differ; every other check holds alike for all of them.
struct CommTraits {
    /// Sums equal the rank-order sum bit for bit (MpiComm; MpiCudaComm, which runs MpiComm's sums;
    /// cuda_emu's NCCL). False: within the stated tolerance only (NCCL on a GPU adds in its own order).
    bool rank_order_sums = true;
    /// Its sends and receives run one after another in the order issued (NcclComm: all on one
    /// stream), so a ring is posted as a chain (rank 0 sends first) and a rank cannot send to itself.
    /// False: point-to-point calls are posted at once and may be waited in any order (MPI).
    bool serial_p2p = false;
    /// describe() is this followed by Comm::describe()'s "world ranks [0, 1]" (and maybe more).
    std::string describe_prefix;
    /// host_timeout_s() is CommOptions::timeout_s (the device comms: host waits on their work are
    /// timed); false: 0 (MpiComm's own waits time out).
    bool host_timeout = false;
    /// abort() makes every later call throw CommError. False: abort() does nothing (MpiComm).
    bool aborts = false;
    /// CommWork::test() moves an operation on and says true once its result is in place (MpiComm,
    /// HierComm). False: test() always says false (the device comms: their transfers advance on a
    /// stream of their own).
    bool test_completes = false;
    /// all_reduce_sum counts CommStats' 2(P-1)/P·n·es. False: the Comm's algorithm moves other bytes
    /// (HierComm counts its three stages, padding included), so only its calls are checked.
    bool flat_all_reduce_bytes = true;
};

using CommFactory = std::function<std::unique_ptr<Comm>(Ops&, const std::vector<int>&, const CommOptions&)>;

/// One Comm as the suite drives it.
struct CommKind {
    std::string name;     ///< "MpiComm", ...: the instantiation's name
    std::string backend;  ///< whose buffers it moves: "cpu" (host memory) or "cuda"
    std::vector<std::string> precisions;  ///< the backend's precisions (the stream-ordering case runs each)
    CommFactory make;
    CommTraits traits;
    /// Bytes the transport itself has handed other ranks for `op` so far, where it can tell (the
    /// emulated NCCL counts them); empty: it cannot.
    std::function<uint64_t(CommOp op)> wire_bytes;
};
inline void PrintTo(const CommKind& k, std::ostream* os) { *os << k.name << " on " << k.backend; }
/// The instantiations' test-name suffix: the backend.
inline std::string kind_suffix(const ::testing::TestParamInfo<CommKind>& info) { return info.param.backend; }

// ---- references ----
/// World rank r's input number `salt`: n elements of t (fp32 values of mixed sign and magnitude;
/// bf16 their truncation; u8 bytes of their magnitudes).
Bytes input_bytes(int r, size_t n, DType t, int salt = 0);
/// Every group member's input (by world rank), in group order.
std::vector<Bytes> inputs_of_group(const Comm& comm, size_t n, DType t, int salt = 0);
/// Index of the first differing element of two n-element buffers of t, or -1.
long first_diff(const uint8_t* a, const uint8_t* b, size_t n, DType t);
/// Each buffer multiplied by 0.5 (exact in fp32 and bf16 for these inputs).
std::vector<Bytes> halved(std::vector<Bytes> in, DType t);

/// Starts MPI where the binary's main() did not (test_cuda_gpu: one rank without mpirun); true.
inline bool start_mpi() {
    mpi_init_once(nullptr, nullptr);
    return true;
}

class CommContract : public ::testing::TestWithParam<CommKind> {
protected:
    const bool mpi_started_ = start_mpi();
    const CommKind& kind = GetParam();
    const CommTraits& traits = kind.traits;
    std::unique_ptr<Ops> ops = make_backend_for(kind.precisions.at(0));
    const int me = world_rank(), W = world_size();

    ~CommContract() override;
    std::unique_ptr<Ops> make_backend_for(const std::string& precision) const;
    std::unique_ptr<Comm> make(const std::vector<int>& ranks = {}, const CommOptions& opt = {}) const {
        return kind.make(*ops, ranks, opt);
    }
    /// A buffer of the backend, freed (after a synchronize) with the fixture.
    void* alloc(size_t bytes);
    /// A new buffer holding h, uploaded on the current stream without synchronizing.
    void* put(const Bytes& h);
    void put_into(void* dst, const Bytes& h);
    /// `bytes` read back after everything queued (synchronizes).
    Bytes get(const void* p, size_t bytes);

    /// `got` (n elements of t) against the sum of elements [first, first + n) of the group's inputs
    /// `in`, as the header comment states.
    void expect_sum(const std::string& what, const Bytes& got, const std::vector<Bytes>& in, DType t, size_t first,
                    size_t n);
    void check_all_reduce(Comm& comm, size_t n, DType t);
    /// Reduce-scatter of n elements per rank; `all` holds every member's P·n-element input.
    void check_reduce_scatter(Comm& comm, const std::vector<Bytes>& all, size_t n, DType t, bool in_place);
    void check_reduce_scatter(Comm& comm, size_t n, DType t, bool in_place);
    /// All-gather of n elements per rank; `all` holds every member's n-element input.
    void check_all_gather(Comm& comm, const std::vector<Bytes>& all, size_t n, DType t, bool in_place);
    void check_all_gather(Comm& comm, size_t n, DType t, bool in_place);
    /// Broadcast of n elements from group index root: every rank ends with root's input.
    void check_broadcast(Comm& comm, size_t n, DType t, int root);
    /// Two messages of n elements around the ring (to rank + 1, from rank − 1), async, arriving in
    /// order; false (nothing sent) for a serial_p2p Comm of one rank.
    bool check_ring(Comm& comm, size_t n, DType t);

private:
    std::vector<void*> bufs_;
    std::vector<std::unique_ptr<Bytes>> kept_;  // host sources of queued uploads
};

}  // namespace llmtrain::commtest
