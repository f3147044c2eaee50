// emu/nccl_coll.cpp — emulated NCCL collectives, send/recv and groups over MPI.
//
// Every call validates its arguments and checks its buffers against the emulated device memory
// at once, then queues an operation on its stream (emu::enqueue); the MPI traffic happens when
// the stream is synchronized, in stream order. Every rank issues the same collectives in the
// same order, so the queued MPI calls match up. All waits go through wait_all, which polls the
// communicator's abort flag.
//
//   AllReduce     each rank reduces one chunk (count split n ways): MPI_Ialltoallv gathers the
//                 chunk from all ranks, reduce_in_rank_order sums it, MPI_Iallgatherv shares it.
//   ReduceScatter MPI_Ialltoall gathers block `rank` from all ranks, then the ordered reduction.
//                 In place when recvbuff == sendbuff + rank*recvcount (NCCL's layout), which
//                 works because the result is written only after the exchange completed.
//   AllGather     MPI_Iallgather; MPI_IN_PLACE exactly when sendbuff == recvbuff + rank*count.
//   Broadcast     root copies sendbuff to recvbuff, then MPI_Ibcast of recvbuff.
//   Send/Recv     MPI_Irecv, completed at the end of its queued task; a send is eager: its data is
//                 copied when its stream runs it and handed to MPI_Isend, and its task ends at
//                 once. On a GPU a send blocks only its own stream while the device's other
//                 streams go on; the emulator runs one process's streams one task at a time, so a
//                 send that waited for its peer would stall them all, and a pipeline whose stages
//                 send activations one way and gradients the other (a send on one stream, a receive
//                 posted earlier on another) would deadlock here where a GPU does not. The copy
//                 keeps the data the send had when its stream reached it, as on a GPU.
//   Group         ncclGroupStart..End collects the calls; End queues them as one task per stream
//                 (streams in first-use order): point-to-point calls are posted non-blocking and
//                 waited for together at the end, so paired send/recv cannot deadlock.
//
// Every call runs the issue-order check first, and reduction results on the communicator that
// CUDA_EMU_NCCL_PERTURB names move by one unit in the last place (both in nccl_check.cpp).
//
// CUDA_EMU_NCCL_MUTE=<world rank>[:<first call>] makes that MPI_COMM_WORLD rank a rank that never
// posts: from its given 0-based call on (collectives and send/recv alike, counted per process), a
// call passes its checks and returns ncclSuccess but queues nothing, so its peers wait until they
// time out. The hung-collective tests use it (tests/cuda/emu_hung.sh).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "emu/emu.hpp"
#include "emu/nccl_comm.hpp"
#include "emu/nccl_reduce.hpp"

namespace emu::nccl {
namespace {

using State = std::shared_ptr<CommState>;

/// Point-to-point requests a queued task still has to complete, with their communicator.
using Progress = std::vector<Pending>;

/// One NCCL call as queued work: collectives complete inside; send/recv append to Progress.
using Op = std::function<void(Progress&)>;

struct GroupedOp {
    cudaStream_t stream;
    Op op;
};

thread_local int group_depth = 0;  // NCCL groups are per thread
thread_local std::vector<GroupedOp> group_ops;

void wait_one(CommState& state, MPI_Request request, const char* what) {
    std::vector<MPI_Request> one{request};
    wait_all(state, one, what);
}

void finish(Progress& progress, const char* what) {
    for (Pending& p : progress) {
        wait_one(*p.state, p.request, what);
        if (p.then) p.then();
    }
}

// Runs queued work; an abort abandons it (a note on stderr), any other error stays a device error.
void run_abandoning_on_abort(const std::function<void()>& work, const char* what) {
    try {
        work();
    } catch (const Aborted& e) {
        std::fprintf(stderr, "cuda_emu: %s: abandoned (%s)\n", what, e.what());
    }
}

ncclResult_t submit(cudaStream_t stream, Op op, const char* what) {
    if (group_depth > 0) {
        group_ops.push_back({stream, std::move(op)});
        return ncclSuccess;
    }
    emu::enqueue(stream, [op = std::move(op), what] {
        run_abandoning_on_abort([&] {
            Progress progress;
            op(progress);
            finish(progress, what);
        }, what);
    }, what);
    return ncclSuccess;
}

std::atomic<uint64_t> g_sent[static_cast<int>(Kind::count)];

void add_sent(Kind k, uint64_t bytes) { g_sent[static_cast<int>(k)] += bytes; }

// Whether this call is one CUDA_EMU_NCCL_MUTE silences (see the header); counts the calls.
bool muted() {
    static const long first = [] {  // the first muted call on this rank, or -1
        const char* v = std::getenv("CUDA_EMU_NCCL_MUTE");
        if (v == nullptr || *v == 0) return -1L;
        char* end = nullptr;
        const long rank = std::strtol(v, &end, 10);
        const long from = *end == ':' ? std::strtol(end + 1, nullptr, 10) : 0;
        int me = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        return rank == me ? from : -1L;
    }();
    static std::atomic<long> calls{0};
    return first >= 0 && calls++ >= first;
}

// How a call takes part in the issue-order check (nccl_check.cpp).
enum class Role { collective, send, recv };

// Runs a call's buffer checks, then queues its operation, preceded by its issue-order check
// (`peer`: the NCCL rank of a send/receive). An emu::Error (a buffer outside emulated device
// memory, an unknown stream) becomes ncclInvalidArgument, as NCCL's own pointer checks report it.
template <class Checks>
ncclResult_t queue(const char* fn, const State& st, cudaStream_t stream, Checks checks, Op op,
                   Role role = Role::collective, int peer = -1) {
    try {
        checks();
        if (muted()) return ncclSuccess;
        Issue issue = note_issue(*st, role == Role::collective ? -1 : peer);
        return submit(stream, [st, op = std::move(op), fn, issue = std::move(issue), role, peer](Progress& p) {
            if (st->aborted) throw Aborted(std::string(fn) + ": communicator aborted before it ran");  // posts nothing
            if (role == Role::collective) check_collective_order(*st, issue, fn);
            else if (role == Role::send) send_order(*st, issue, peer, fn);
            else recv_order(st, issue, peer, fn, p);
            op(p);
        }, fn);
    } catch (const emu::Error& e) {
        return fail(ncclInvalidArgument, fn, e.what());
    }
}

// Argument checks shared by every call. Returns ncclSuccess or the reported error.
ncclResult_t check_call(const char* fn, ncclComm_t comm, size_t count, ncclDataType_t type) {
    if (comm == nullptr) return fail(ncclInvalidArgument, fn, "null communicator");
    if (type_size(type) == 0) return fail(ncclInvalidArgument, fn, "data type " + std::to_string(type) + " is not emulated");
    if (count > static_cast<size_t>(INT_MAX))
        return fail(ncclInvalidArgument, fn, "count " + std::to_string(count) + " exceeds INT_MAX (MPI counts)");
    return ncclSuccess;
}

void check_buffer(const void* p, size_t elements, ncclDataType_t type, const char* which) {
    if (elements > 0) emu::check_device_range(p, elements * type_size(type), which);
}

const char* at(const void* p, size_t elements, ncclDataType_t type) {
    return static_cast<const char*>(p) + elements * type_size(type);
}

// Reduces n contiguous blocks of `count` elements (block r from rank r) into out.
void reduce_blocks(ncclRedOp_t op, ncclDataType_t type, const std::vector<char>& blocks, int n, size_t count,
                   void* out) {
    std::vector<const void*> in(n);
    for (int r = 0; r < n; ++r) in[r] = blocks.data() + r * count * type_size(type);
    reduce_in_rank_order(op, type, in.data(), n, out, count);
}

}  // namespace
}  // namespace emu::nccl

using emu::nccl::fail;

uint64_t emu::nccl::bytes_sent(Kind kind) { return g_sent[static_cast<int>(kind)]; }

extern "C" {

/// recvbuff[i] = op over ranks of sendbuff[i], i < count; identical bits on every rank.
/// In place when sendbuff == recvbuff.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    const char* fn = "ncclAllReduce";
    if (ncclResult_t r = emu::nccl::check_call(fn, comm, count, datatype); r != ncclSuccess) return r;
    if (!emu::nccl::op_supported(op)) return fail(ncclInvalidArgument, fn, "reduction op " + std::to_string(op));
    if (count == 0) return ncclSuccess;
    return emu::nccl::queue(fn, comm->state, stream, [&] {
        emu::nccl::check_buffer(sendbuff, count, datatype, "sendbuff");
        emu::nccl::check_buffer(recvbuff, count, datatype, "recvbuff");
    }, [st = comm->state, sendbuff, recvbuff, count, datatype, op, fn](auto&) {
        const int n = st->size, me = st->rank;
        const size_t es = emu::nccl::type_size(datatype);
        if (n == 1) {
            if (sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, count * es);
            return;
        }
        // Chunk r = elements [off[r], off[r] + cnt[r]) is reduced by rank r.
        std::vector<int> cnt(n), off(n), from_cnt(n), from_off(n);
        for (int r = 0; r < n; ++r) {
            off[r] = static_cast<int>(count * r / n);
            cnt[r] = static_cast<int>(count * (r + 1) / n) - off[r];
        }
        for (int r = 0; r < n; ++r) {  // my chunk arrives from every rank, stacked in rank order
            from_cnt[r] = cnt[me];
            from_off[r] = r * cnt[me];
        }
        const MPI_Datatype mt = emu::nccl::transport_type(datatype);
        std::vector<char> gathered(static_cast<size_t>(n) * cnt[me] * es);
        MPI_Request req;
        emu::nccl::check_mpi(MPI_Ialltoallv(sendbuff, cnt.data(), off.data(), mt, gathered.data(), from_cnt.data(),
                                            from_off.data(), mt, st->comm, &req),
                             *st, fn);
        emu::nccl::wait_one(*st, req, fn);
        char* mine = const_cast<char*>(emu::nccl::at(recvbuff, off[me], datatype));
        emu::nccl::reduce_blocks(op, datatype, gathered, n, cnt[me], mine);
        if (st->perturb) emu::nccl::perturb_last_bit(datatype, mine, size_t(cnt[me]));  // before it is shared
        emu::nccl::check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recvbuff, cnt.data(), off.data(),
                                             mt, st->comm, &req),
                             *st, fn);
        emu::nccl::wait_one(*st, req, fn);
        // Out: every chunk but mine in the all-to-all, then mine to each of the n - 1 others.
        emu::nccl::add_sent(emu::nccl::Kind::all_reduce, ((count - cnt[me]) + size_t(n - 1) * cnt[me]) * es);
    });
}

/// recvbuff (recvcount) = op over ranks of block `rank` of sendbuff (nranks*recvcount).
/// In place when recvbuff == sendbuff + rank*recvcount.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    const char* fn = "ncclReduceScatter";
    if (ncclResult_t r = emu::nccl::check_call(fn, comm, recvcount, datatype); r != ncclSuccess) return r;
    if (!emu::nccl::op_supported(op)) return fail(ncclInvalidArgument, fn, "reduction op " + std::to_string(op));
    if (recvcount == 0) return ncclSuccess;
    const int n = comm->state->size;
    return emu::nccl::queue(fn, comm->state, stream, [&] {
        emu::nccl::check_buffer(sendbuff, recvcount * n, datatype, "sendbuff");
        emu::nccl::check_buffer(recvbuff, recvcount, datatype, "recvbuff");
    }, [st = comm->state, sendbuff, recvbuff, recvcount, datatype, op, fn](auto&) {
        const int cnt = static_cast<int>(recvcount);
        const MPI_Datatype mt = emu::nccl::transport_type(datatype);
        std::vector<char> gathered(st->size * recvcount * emu::nccl::type_size(datatype));
        MPI_Request req;
        emu::nccl::check_mpi(MPI_Ialltoall(sendbuff, cnt, mt, gathered.data(), cnt, mt, st->comm, &req), *st, fn);
        emu::nccl::wait_one(*st, req, fn);
        emu::nccl::reduce_blocks(op, datatype, gathered, st->size, recvcount, recvbuff);
        if (st->perturb) emu::nccl::perturb_last_bit(datatype, recvbuff, recvcount);
        emu::nccl::add_sent(emu::nccl::Kind::reduce_scatter,
                            size_t(st->size - 1) * recvcount * emu::nccl::type_size(datatype));
    });
}

/// recvbuff (nranks*sendcount) gets rank r's sendbuff at offset r*sendcount.
/// In place when sendbuff == recvbuff + rank*sendcount.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* fn = "ncclAllGather";
    if (ncclResult_t r = emu::nccl::check_call(fn, comm, sendcount, datatype); r != ncclSuccess) return r;
    if (sendcount == 0) return ncclSuccess;
    const int n = comm->state->size;
    return emu::nccl::queue(fn, comm->state, stream, [&] {
        emu::nccl::check_buffer(sendbuff, sendcount, datatype, "sendbuff");
        emu::nccl::check_buffer(recvbuff, sendcount * n, datatype, "recvbuff");
    }, [st = comm->state, sendbuff, recvbuff, sendcount, datatype, fn](auto&) {
        const int cnt = static_cast<int>(sendcount);
        const size_t bytes = sendcount * emu::nccl::type_size(datatype);
        const MPI_Datatype mt = emu::nccl::transport_type(datatype);
        const char* mine = emu::nccl::at(recvbuff, st->rank * sendcount, datatype);
        const char* send = static_cast<const char*>(sendbuff);
        const char* recv = static_cast<const char*>(recvbuff);
        std::vector<char> copy;
        const void* source = sendbuff;
        if (send == mine) {
            source = MPI_IN_PLACE;
        } else if (send < recv + st->size * bytes && recv < send + bytes) {
            copy.assign(send, send + bytes);  // overlapping, but not NCCL's in-place layout
            source = copy.data();
        }
        MPI_Request req;
        emu::nccl::check_mpi(MPI_Iallgather(source, source == MPI_IN_PLACE ? 0 : cnt, mt, recvbuff, cnt, mt,
                                            st->comm, &req),
                             *st, fn);
        emu::nccl::wait_one(*st, req, fn);
        emu::nccl::add_sent(emu::nccl::Kind::all_gather, size_t(st->size - 1) * bytes);
    });
}

/// recvbuff (count) on every rank = sendbuff of rank `root` (sendbuff is read on root only).
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* fn = "ncclBroadcast";
    if (ncclResult_t r = emu::nccl::check_call(fn, comm, count, datatype); r != ncclSuccess) return r;
    if (root < 0 || root >= comm->state->size)
        return fail(ncclInvalidArgument, fn, "root " + std::to_string(root) + " of " + std::to_string(comm->state->size));
    if (count == 0) return ncclSuccess;
    return emu::nccl::queue(fn, comm->state, stream, [&] {
        if (comm->state->rank == root) emu::nccl::check_buffer(sendbuff, count, datatype, "sendbuff");
        emu::nccl::check_buffer(recvbuff, count, datatype, "recvbuff");
    }, [st = comm->state, sendbuff, recvbuff, count, datatype, root, fn](auto&) {
        if (st->rank == root && sendbuff != recvbuff)
            std::memmove(recvbuff, sendbuff, count * emu::nccl::type_size(datatype));
        MPI_Request req;
        emu::nccl::check_mpi(MPI_Ibcast(recvbuff, static_cast<int>(count), emu::nccl::transport_type(datatype), root,
                                        st->comm, &req),
                             *st, fn);
        emu::nccl::wait_one(*st, req, fn);
        if (st->rank == root && st->size > 1)
            emu::nccl::add_sent(emu::nccl::Kind::broadcast, count * emu::nccl::type_size(datatype));
    });
}

/// Sends count elements to `peer`, which must post the matching ncclRecv. Pairs that depend on
/// each other belong in one ncclGroupStart/End.
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    const char* fn = "ncclSend";
    if (ncclResult_t r = emu::nccl::check_call(fn, comm, count, datatype); r != ncclSuccess) return r;
    if (peer < 0 || peer >= comm->state->size)
        return fail(ncclInvalidArgument, fn, "peer " + std::to_string(peer) + " of " + std::to_string(comm->state->size));
    if (count == 0) return ncclSuccess;
    return emu::nccl::queue(fn, comm->state, stream, [&] {
        emu::nccl::check_buffer(sendbuff, count, datatype, "sendbuff");
    }, [st = comm->state, sendbuff, count, datatype, peer, fn](emu::nccl::Progress&) {
        auto& sends = st->eager_sends;
        for (size_t k = 0; k < sends.size();) {  // drop the sends that completed
            int done = 0;
            emu::nccl::check_mpi(MPI_Test(&sends[k].first, &done, MPI_STATUS_IGNORE), *st, fn);
            if (done) sends.erase(sends.begin() + long(k));
            else ++k;
        }
        const char* src = static_cast<const char*>(sendbuff);
        std::vector<char> data(src, src + count * emu::nccl::type_size(datatype));
        MPI_Request req;
        emu::nccl::check_mpi(MPI_Isend(data.data(), static_cast<int>(count), emu::nccl::transport_type(datatype), peer,
                                       0, st->comm, &req),
                             *st, fn);
        sends.emplace_back(req, std::move(data));
        emu::nccl::add_sent(emu::nccl::Kind::send, count * emu::nccl::type_size(datatype));
    }, emu::nccl::Role::send, peer);
}

/// Receives count elements from `peer` into recvbuff.
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    const char* fn = "ncclRecv";
    if (ncclResult_t r = emu::nccl::check_call(fn, comm, count, datatype); r != ncclSuccess) return r;
    if (peer < 0 || peer >= comm->state->size)
        return fail(ncclInvalidArgument, fn, "peer " + std::to_string(peer) + " of " + std::to_string(comm->state->size));
    if (count == 0) return ncclSuccess;
    return emu::nccl::queue(fn, comm->state, stream, [&] {
        emu::nccl::check_buffer(recvbuff, count, datatype, "recvbuff");
    }, [st = comm->state, recvbuff, count, datatype, peer, fn](emu::nccl::Progress& p) {
        MPI_Request req;
        emu::nccl::check_mpi(MPI_Irecv(recvbuff, static_cast<int>(count), emu::nccl::transport_type(datatype), peer,
                                       0, st->comm, &req),
                             *st, fn);
        p.push_back({st, req, {}});
    }, emu::nccl::Role::recv, peer);
}

/// Starts (or nests) a group: calls are collected until the outermost ncclGroupEnd.
ncclResult_t ncclGroupStart() {
    if (emu::nccl::group_depth++ == 0) emu::nccl::note_group_start();
    return ncclSuccess;
}

/// Ends a group; the outermost End queues the collected calls, one task per stream.
/// Errors: ncclInvalidUsage without a matching ncclGroupStart.
ncclResult_t ncclGroupEnd() {
    if (emu::nccl::group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd", "no matching ncclGroupStart");
    if (--emu::nccl::group_depth > 0) return ncclSuccess;
    emu::nccl::note_group_end();
    std::vector<emu::nccl::GroupedOp> ops = std::move(emu::nccl::group_ops);
    emu::nccl::group_ops.clear();
    std::vector<cudaStream_t> streams;
    for (const auto& g : ops)
        if (std::find(streams.begin(), streams.end(), g.stream) == streams.end()) streams.push_back(g.stream);
    for (cudaStream_t s : streams) {
        std::vector<emu::nccl::Op> mine;
        for (auto& g : ops)
            if (g.stream == s) mine.push_back(std::move(g.op));
        try {
            emu::enqueue(s, [mine = std::move(mine)] {
                emu::nccl::run_abandoning_on_abort([&] {
                    emu::nccl::Progress progress;
                    for (const auto& op : mine) op(progress);
                    emu::nccl::finish(progress, "ncclGroupEnd");
                }, "ncclGroupEnd");
            }, "ncclGroupEnd");
        } catch (const emu::Error& e) {  // an unknown stream
            return fail(ncclInvalidArgument, "ncclGroupEnd", e.what());
        }
    }
    return ncclSuccess;
}

}  // extern "C"
