// emu/nccl_check.cpp — two checks the emulated NCCL adds to what it computes
// (docs/cuda_emu.md "NCCL"):
//
// Perturbation. CUDA_EMU_NCCL_PERTURB=<world rank>,<world rank>,... names one communicator by its
// members' world ranks in NCCL rank order; every reduction result on it (AllReduce, ReduceScatter)
// is moved up by one unit in the last place, on all its members alike. Real NCCL sums in an order
// of its own per communicator, so two communicators summing equal inputs may differ in the last
// bit; this makes such a difference certain, for tests that must show it does no harm (replicas
// of a sub-DP run stay bitwise equal, tests/parallel/test_replicas.cpp).
//
// Issue order. NCCL requires that ranks issue the operations of communicators they share in the
// same order: one rank's kernel waiting on communicator A while its peer's waits on B is a
// deadlock on a GPU (the emulator's eager sends would hide it). Each process counts, per peer
// world rank, the calls it has issued that involve that peer (a collective: every member; a send
// or receive: its peer; one ncclGroupStart..End: one position). When the call runs, the positions
// travel with it (collectives: a small all-to-all first; a send: a tag-1 message beside its data)
// and each side compares the peer's position with its own: any difference is reported, naming
// both world ranks, the call and the positions, and ends the job with MPI_Abort (exit code 86).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "emu/nccl_comm.hpp"

namespace emu::nccl {
namespace {

std::mutex g_mutex;                 // the counters below (calls come from the host thread; cheap)
std::map<int, uint64_t> g_issued;   // per peer world rank: calls issued that involve it
std::set<int> g_group_peers;        // peers touched by the open group
bool g_in_group = false;

std::string ranks_text(const std::vector<int>& ranks) {
    std::string s = "[";
    for (size_t i = 0; i < ranks.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(ranks[i]);
    }
    return s + "]";
}

[[noreturn]] void order_differs(const CommState& st, const Issue& issue, int peer, uint64_t theirs, const char* fn) {
    std::fprintf(stderr,
                 "cuda_emu: NCCL issue order differs between world ranks %d and %d: world rank %d issued %s "
                 "(call %llu on the communicator of world ranks %s) as its call %llu involving world rank %d, "
                 "but world rank %d issued the matching call as its call %llu involving world rank %d. "
                 "Operations on communicators two ranks share must be issued in the same order on both "
                 "(NCCL can deadlock otherwise; docs/cuda_emu.md).\n",
                 st.world[st.rank], st.world[peer], st.world[st.rank], fn, (unsigned long long)issue.call,
                 ranks_text(st.world).c_str(), (unsigned long long)issue.index[peer], st.world[peer],
                 st.world[peer], (unsigned long long)theirs, st.world[st.rank]);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 86);
    std::abort();
}

}  // namespace

bool perturbed(const std::vector<int>& world) {
    static const std::vector<int> named = [] {
        std::vector<int> r;
        const char* v = std::getenv("CUDA_EMU_NCCL_PERTURB");
        for (const char* p = v; p && *p;) {
            char* end = nullptr;
            r.push_back(int(std::strtol(p, &end, 10)));
            if (end == p) {
                std::fprintf(stderr, "cuda_emu: CUDA_EMU_NCCL_PERTURB=\"%s\": expected world ranks like 2,3\n", v);
                std::exit(2);
            }
            p = *end == ',' ? end + 1 : end;
        }
        return r;
    }();
    return !named.empty() && named == world;
}

void perturb_last_bit(ncclDataType_t type, void* p, size_t n) {
    auto bump = [&](auto bits) {  // bits: an unsigned type of the element's size
        using U = decltype(bits);
        for (size_t i = 0; i < n; ++i) {
            U x;
            std::memcpy(&x, static_cast<char*>(p) + i * sizeof(U), sizeof(U));
            ++x;
            std::memcpy(static_cast<char*>(p) + i * sizeof(U), &x, sizeof(U));
        }
    };
    switch (type) {
        case ncclFloat16: case ncclBfloat16: bump(uint16_t{}); break;
        case ncclFloat32: bump(uint32_t{}); break;
        case ncclFloat64: bump(uint64_t{}); break;
        default: break;
    }
}

Issue note_issue(CommState& st, int peer) {
    std::lock_guard<std::mutex> lock(g_mutex);
    Issue issue;
    issue.call = st.issued++;
    issue.index.assign(size_t(st.size), UINT64_MAX);
    for (int r = 0; r < st.size; ++r) {
        if (r == st.rank || (peer >= 0 && r != peer)) continue;
        const int w = st.world[r];
        issue.index[r] = g_issued[w];
        if (g_in_group) g_group_peers.insert(w);
        else ++g_issued[w];
    }
    return issue;
}

void note_group_start() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_in_group = true;
}

void note_group_end() {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (int w : g_group_peers) ++g_issued[w];
    g_group_peers.clear();
    g_in_group = false;
}

void check_collective_order(CommState& st, const Issue& issue, const char* fn) {
    if (st.size == 1) return;
    std::vector<uint64_t> theirs(size_t(st.size));
    MPI_Request req;
    check_mpi(MPI_Ialltoall(issue.index.data(), 1, MPI_UINT64_T, theirs.data(), 1, MPI_UINT64_T, st.comm, &req), st,
              fn);
    std::vector<MPI_Request> one{req};
    wait_all(st, one, fn);
    for (int r = 0; r < st.size; ++r)
        if (r != st.rank && theirs[r] != issue.index[r]) order_differs(st, issue, r, theirs[r], fn);
}

void send_order(CommState& st, const Issue& issue, int peer, const char* fn) {
    std::vector<char> data(sizeof(uint64_t));
    std::memcpy(data.data(), &issue.index[peer], sizeof(uint64_t));
    MPI_Request req;
    check_mpi(MPI_Isend(data.data(), 1, MPI_UINT64_T, peer, 1, st.comm, &req), st, fn);
    st.eager_sends.emplace_back(req, std::move(data));
}

void recv_order(const std::shared_ptr<CommState>& st, const Issue& issue, int peer, const char* fn,
                std::vector<Pending>& progress) {
    auto theirs = std::make_shared<uint64_t>(0);
    MPI_Request req;
    check_mpi(MPI_Irecv(theirs.get(), 1, MPI_UINT64_T, peer, 1, st->comm, &req), *st, fn);
    CommState* s = st.get();  // alive: the Pending holds it
    progress.push_back({st, req, [s, issue, peer, theirs, fn] {
                            if (*theirs != issue.index[peer]) order_differs(*s, issue, peer, *theirs, fn);
                        }});
}

}  // namespace emu::nccl
