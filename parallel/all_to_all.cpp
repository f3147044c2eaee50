// parallel/all_to_all.cpp — Comm::all_to_all_v's default body (parallel/comm.hpp): an all-to-all
// with per-peer counts built from the Comm's own point-to-point operations, so every Comm whose
// send/recv take its buffers has it (MpiComm: MPI_Isend/MPI_Irecv; MpiCudaComm, whose staged
// MPI calls never block the device). NcclComm overrides it: its ungrouped ncclRecv would block its
// stream before the matching ncclSend, so it groups them (parallel/nccl_comm.cpp). Expert
// parallelism's token exchange (docs/parallelism.md "Expert parallelism").
#include <stdexcept>
#include <string>
#include <utility>

#include "parallel/comm.hpp"
#include "parallel/ep_group.hpp"

namespace llmtrain {

void Comm::all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                        DType t) {
    if (!send_counts || !recv_counts)
        throw std::invalid_argument("all_to_all_v: null counts on " + describe());
    const int P = size(), me = rank();
    const size_t es = dtype_size(t);
    // The point-to-point calls count themselves as send / recv; the exchange is counted once, as
    // all_to_all, by what leaves this rank (its own block stays here).
    const CommStats before = stats_;
    std::vector<CommHandle> recvs, sends;
    size_t off = 0;
    for (int q = 0; q < P; ++q) {
        if (recv_counts[q] > 0)
            recvs.push_back(recv_async(static_cast<char*>(recv) + off * es, recv_counts[q], t, q));
        off += recv_counts[q];
    }
    uint64_t wire = 0;
    off = 0;
    for (int q = 0; q < P; ++q) {
        if (send_counts[q] > 0)
            sends.push_back(send_async(static_cast<const char*>(send) + off * es, send_counts[q], t, q));
        if (q != me) wire += uint64_t(send_counts[q]) * es;
        off += send_counts[q];
    }
    for (CommHandle& h : sends) h->wait();
    for (CommHandle& h : recvs) h->wait();
    stats_ = before;
    count(CommOp::all_to_all, wire);
}

EpGroup::EpGroup(std::unique_ptr<Comm> comm) : comm_(std::move(comm)) {
    if (!comm_) throw std::invalid_argument("EpGroup: null Comm");
}

}  // namespace llmtrain
