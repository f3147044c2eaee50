// emu/nccl.cpp — emulated NCCL communicators over MPI: unique ids, ncclCommInitRank,
// ncclCommSplit, destroy/abort, error queries.
//
// Bootstrap. NCCL's unique id names a rendezvous served by the process that created it; here the
// id holds the creator's MPI_COMM_WORLD rank and a serial number. In ncclCommInitRank every
// member sends (rank, nranks) to the creator over MPI_COMM_WORLD (a tag reserved for the id),
// the creator answers each with the world ranks of all members in NCCL rank order, and the
// members build their MPI communicator with MPI_Comm_create_group — collective over the members
// only, so sub-communicators can be created by their members alone, like NCCL's. The creator
// must be a member (it is, whenever rank 0 of the new communicator calls ncclGetUniqueId).
// MPI is initialized by the caller (MPI_THREAD_FUNNELED suffices); if not, we initialize it.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emu/nccl_comm.hpp"

namespace emu::nccl {

CommState::CommState(MPI_Comm c) : comm(c) {
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);  // errors become exceptions, not MPI_Abort
    MPI_Group mine, world_group;
    MPI_Comm_group(c, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    std::vector<int> ranks(size);
    for (int r = 0; r < size; ++r) ranks[r] = r;
    world.resize(size);
    MPI_Group_translate_ranks(mine, size, ranks.data(), world_group, world.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world_group);
    perturb = perturbed(world);
}

CommState::~CommState() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || aborted || comm == MPI_COMM_NULL) return;
    for (auto& [request, data] : eager_sends) MPI_Wait(&request, MPI_STATUS_IGNORE);
    MPI_Comm_free(&comm);
}

namespace {
thread_local std::string last_error;
}

ncclResult_t fail(ncclResult_t result, const char* fn, const std::string& why) {
    last_error = std::string(fn) + ": " + why;
    std::fprintf(stderr, "cuda_emu: %s\n", last_error.c_str());
    return result;
}

void check_mpi(int mpi_result, CommState& state, const char* what) {
    if (mpi_result == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(mpi_result, text, &len);
    state.async_error = ncclSystemError;
    throw Error(std::string(what) + ": MPI error: " + std::string(text, len));
}

void wait_all(CommState& state, std::vector<MPI_Request>& requests, const char* what) {
    while (!requests.empty()) {
        if (state.aborted) throw Aborted(std::string(what) + ": communicator aborted while waiting");
        int done = 0;
        check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
                  state, what);
        if (done) return;
        std::this_thread::yield();  // the peers may share this core (mpirun --oversubscribe)
    }
}

namespace {

constexpr char kMagic[16] = "cuda_emu-nccl1";
constexpr int kTagBase = 20000, kTagRange = 10000;  // bootstrap tags stay below MPI's 32767 minimum

/// What our ncclUniqueId holds (the rest of the 128 bytes is zero).
struct IdFields {
    char magic[16];
    int32_t creator;  ///< MPI_COMM_WORLD rank of the process that called ncclGetUniqueId
    uint64_t serial;  ///< per-creator counter: tells ids, and their bootstrap tags, apart
};
static_assert(sizeof(IdFields) <= NCCL_UNIQUE_ID_BYTES);

void finalize_mpi_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

void ensure_mpi() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit(finalize_mpi_at_exit);
}

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

// The bootstrap exchange; returns the members' world ranks in NCCL rank order, or an empty
// vector (with *why set) when the members disagree.
std::vector<int> rendezvous(const IdFields& id, int nranks, int rank, std::string* why) {
    const int tag = kTagBase + static_cast<int>(id.serial % kTagRange);
    const int me = world_rank();
    std::vector<int> members(nranks, -1);
    if (me == id.creator) {
        members[rank] = me;
        std::vector<int> joined;  // everyone who said hello gets an answer, even a rejection
        for (int i = 1; i < nranks; ++i) {
            int64_t hello[4];  // serial, rank, nranks, world rank
            MPI_Recv(hello, 4, MPI_INT64_T, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            const int64_t r = hello[1];
            joined.push_back(static_cast<int>(hello[3]));
            if (static_cast<uint64_t>(hello[0]) != id.serial || hello[2] != nranks || r < 0 || r >= nranks ||
                members[r] != -1)
                *why = "world rank " + std::to_string(hello[3]) + " joined as rank " + std::to_string(r) + " of " +
                       std::to_string(hello[2]) + " (creator expects " + std::to_string(nranks) +
                       " distinct ranks)";
            else
                members[r] = static_cast<int>(hello[3]);
        }
        std::vector<int> answer = why->empty() ? members : std::vector<int>(nranks, -1);
        for (int w : joined) MPI_Send(answer.data(), nranks, MPI_INT, w, tag, MPI_COMM_WORLD);
        if (!why->empty()) return {};
    } else {
        int64_t hello[4] = {static_cast<int64_t>(id.serial), rank, nranks, me};
        MPI_Send(hello, 4, MPI_INT64_T, id.creator, tag, MPI_COMM_WORLD);
        MPI_Recv(members.data(), nranks, MPI_INT, id.creator, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (members[0] < 0) {
            *why = "the id's creator (world rank " + std::to_string(id.creator) + ") rejected the ranks";
            return {};
        }
    }
    return members;
}

}  // namespace
}  // namespace emu::nccl

using emu::nccl::fail;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
    if (version == nullptr) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/// Creates an id naming this process (its MPI_COMM_WORLD rank) as the rendezvous; broadcast it
/// to the other members (e.g. MPI_Bcast) before ncclCommInitRank.
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
    if (uniqueId == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId", "null pointer");
    emu::nccl::ensure_mpi();
    static std::atomic<uint64_t> serial{0};
    emu::nccl::IdFields id{};
    std::memcpy(id.magic, emu::nccl::kMagic, sizeof(id.magic));
    id.creator = emu::nccl::world_rank();
    id.serial = serial++;
    std::memset(uniqueId, 0, sizeof(*uniqueId));
    std::memcpy(uniqueId->internal, &id, sizeof(id));
    return ncclSuccess;
}

/// Joins communicator `commId` as `rank` of `nranks`; blocks until all members have joined.
/// Errors: ncclInvalidArgument for a bad rank/nranks, a foreign id or members that disagree.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    const char* fn = "ncclCommInitRank";
    if (comm == nullptr) return fail(ncclInvalidArgument, fn, "null comm pointer");
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, fn,
                    "rank " + std::to_string(rank) + " of nranks " + std::to_string(nranks));
    emu::nccl::IdFields id;
    std::memcpy(&id, commId.internal, sizeof(id));
    if (std::memcmp(id.magic, emu::nccl::kMagic, sizeof(id.magic)) != 0)
        return fail(ncclInvalidArgument, fn, "the id does not come from ncclGetUniqueId");
    emu::nccl::ensure_mpi();
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (id.creator < 0 || id.creator >= world || nranks > world)
        return fail(ncclInvalidArgument, fn, "id creator or nranks outside MPI_COMM_WORLD");

    std::string why;
    std::vector<int> members = emu::nccl::rendezvous(id, nranks, rank, &why);
    if (members.empty()) return fail(ncclInvalidArgument, fn, why);
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, members.data(), &group);
    MPI_Comm mpi_comm = MPI_COMM_NULL;
    const int tag = emu::nccl::kTagBase + static_cast<int>(id.serial % emu::nccl::kTagRange);
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &mpi_comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS || mpi_comm == MPI_COMM_NULL)
        return fail(ncclSystemError, fn, "MPI_Comm_create_group failed");
    *comm = new ncclComm{std::make_shared<emu::nccl::CommState>(mpi_comm)};
    return ncclSuccess;
}

/// As ncclCommInitRank; the config (blocking, CTA counts, names) changes nothing here: every
/// call completes before it returns.
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* /*config*/) {
    return ncclCommInitRank(comm, nranks, commId, rank);
}

/// Collective over `comm`: ranks passing the same color form a new communicator, ordered by
/// (key, old rank). color NCCL_SPLIT_NOCOLOR (-1; not MPI_UNDEFINED) joins none: *newcomm = NULL.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* /*config*/) {
    const char* fn = "ncclCommSplit";
    if (comm == nullptr || newcomm == nullptr) return fail(ncclInvalidArgument, fn, "null communicator");
    *newcomm = nullptr;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return fail(ncclInvalidArgument, fn, "color " + std::to_string(color) + " (must be >= 0 or NCCL_SPLIT_NOCOLOR)");
    MPI_Comm out = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm->state->comm, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &out);
    if (rc != MPI_SUCCESS) return fail(ncclSystemError, fn, "MPI_Comm_split failed");
    if (out != MPI_COMM_NULL) *newcomm = new ncclComm{std::make_shared<emu::nccl::CommState>(out)};
    return ncclSuccess;
}

/// Nothing to flush: queued work keeps the communicator alive by itself.
ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm ? ncclSuccess : ncclInvalidArgument; }

/// Releases the handle; the MPI communicator is freed once no queued work refers to it.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete comm;  // NULL is allowed, as in NCCL
    return ncclSuccess;
}

/// Marks the communicator aborted, so that a collective waiting on it (in another thread's
/// stream synchronization) is abandoned instead of hanging — its stream goes on, with no device
/// error, as after a real abort — and so are the ones queued after it; releases the handle. Safe to call from
/// a watchdog thread: it makes no MPI call.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (comm == nullptr) return ncclSuccess;
    comm->state->aborted = true;
    delete comm;
    return ncclSuccess;
}

/// ncclSuccess, or the error a queued operation on this communicator met (ncclSystemError for
/// an MPI failure).
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    if (comm == nullptr || asyncError == nullptr) return ncclInvalidArgument;
    *asyncError = comm->state->async_error;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
    *count = comm->state->size;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
    *rank = comm->state->rank;
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error";
        case ncclSystemError: return "unhandled system error";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}

/// The reason of this thread's last failed call, "" when none.
const char* ncclGetLastError(ncclComm_t /*comm*/) { return emu::nccl::last_error.c_str(); }

}  // extern "C"
