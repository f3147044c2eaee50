// parallel/mpi_comm.cpp — MPI start-up and MpiComm, the host-buffer Comm of the CPU backend.
//
// all_reduce_sum is written as a reduce-scatter followed by an all-gather (the bandwidth-optimal
// decomposition used by ring all-reduce, Patarasuk & Yuan 2009), but with MPI_Alltoallv so that the
// rank owning a chunk adds every rank's contribution itself, in rank order. MPI_Allreduce leaves the
// order of floating-point additions to the library; this way every rank gets the same bits and the
// result does not depend on the MPI algorithm chosen.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "parallel/comm.hpp"

namespace llmtrain {

namespace {

bool g_we_initialized = false;

/// Throws CommError naming `what` and MPI's message when rc is not MPI_SUCCESS.
void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw CommError(std::string("MPI: ") + what + " failed: " + std::string(msg, len));
}

bool mpi_active() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

/// bf16 (raw bits) -> fp32: bf16 is the upper half of an fp32.
float bf16_to_f32(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

/// fp32 -> bf16 with round-to-nearest-even (NaN stays NaN).
uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

class MpiComm final : public Comm {
public:
    explicit MpiComm(MPI_Comm comm) : comm_(comm) {
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
    }
    ~MpiComm() override {
        if (mpi_active()) MPI_Comm_free(&comm_);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }

    void all_reduce_sum(void* buf, size_t n, DType t) override {
        if (size_ == 1 || n == 0) return;
        // Segments keep every per-rank byte count far below INT_MAX.
        const size_t seg = size_t(1) << 25;
        const size_t es = dtype_size(t);
        for (size_t off = 0; off < n; off += seg)
            reduce_segment(static_cast<uint8_t*>(buf) + off * es, std::min(seg, n - off), t);
    }

    void all_reduce_max(float* buf, size_t n) override {
        // max is exact and order-free, so MPI's own reduction is bit-identical on every rank.
        const size_t seg = size_t(1) << 28;
        for (size_t off = 0; off < n; off += seg)
            check(MPI_Allreduce(MPI_IN_PLACE, buf + off, int(std::min(seg, n - off)), MPI_FLOAT,
                                MPI_MAX, comm_),
                  "MPI_Allreduce(max)");
    }

    void broadcast(void* buf, size_t bytes, int root) override {
        const size_t seg = size_t(1) << 30;
        for (size_t off = 0; off < bytes; off += seg)
            check(MPI_Bcast(static_cast<uint8_t*>(buf) + off, int(std::min(seg, bytes - off)), MPI_BYTE,
                            root, comm_),
                  "MPI_Bcast");
    }

    void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

private:
    /// Sum of n elements over the group, rank order, into every rank's buf.
    void reduce_segment(uint8_t* buf, size_t n, DType t) {
        const int P = size_;
        const size_t es = dtype_size(t);
        // Chunk c of the segment: elements [first(c), first(c+1)), balanced to within one element.
        auto first = [&](int c) { return n / P * c + std::min<size_t>(c, n % P); };
        std::vector<int> scount(P), sdispl(P), rcount(P), rdispl(P);
        const size_t mine = first(rank_ + 1) - first(rank_);
        for (int c = 0; c < P; ++c) {
            scount[c] = int((first(c + 1) - first(c)) * es);
            sdispl[c] = int(first(c) * es);
            rcount[c] = int(mine * es);  // every rank sends us its copy of our chunk
            rdispl[c] = int(c * mine * es);
        }
        scratch_.resize(P * mine * es);
        check(MPI_Alltoallv(buf, scount.data(), sdispl.data(), MPI_BYTE, scratch_.data(), rcount.data(),
                            rdispl.data(), MPI_BYTE, comm_),
              "MPI_Alltoallv (reduce-scatter)");
        uint8_t* out = buf + first(rank_) * es;  // (mine) our chunk, summed in rank order
        if (t == DType::f32) {
            const float* in = reinterpret_cast<const float*>(scratch_.data());
            float* o = reinterpret_cast<float*>(out);
            for (size_t i = 0; i < mine; ++i) {
                float acc = in[i];
                for (int r = 1; r < P; ++r) acc += in[r * mine + i];
                o[i] = acc;
            }
        } else {
            const uint16_t* in = reinterpret_cast<const uint16_t*>(scratch_.data());
            uint16_t* o = reinterpret_cast<uint16_t*>(out);
            for (size_t i = 0; i < mine; ++i) {
                float acc = bf16_to_f32(in[i]);
                for (int r = 1; r < P; ++r) acc += bf16_to_f32(in[r * mine + i]);
                o[i] = f32_to_bf16(acc);
            }
        }
        for (int c = 0; c < P; ++c) {
            rcount[c] = scount[c];
            rdispl[c] = sdispl[c];
        }
        check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buf, rcount.data(), rdispl.data(), MPI_BYTE, comm_),
              "MPI_Allgatherv (all-gather)");
    }

    MPI_Comm comm_;
    int rank_ = 0, size_ = 1;
    std::vector<uint8_t> scratch_;  // (P * chunk) received contributions
};

}  // namespace

void mpi_init_once(int* argc, char*** argv) {
    int init = 0;
    MPI_Initialized(&init);
    if (init) return;
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    g_we_initialized = true;
}

void mpi_finalize() {
    if (g_we_initialized && mpi_active()) MPI_Finalize();
}

void mpi_abort(int code) {
    if (mpi_active() && world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
}

int world_rank() {
    if (!mpi_active()) return 0;
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int world_size() {
    if (!mpi_active()) return 1;
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}

int local_rank() {
    for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
        if (const char* v = std::getenv(var)) return std::atoi(v);
    return 0;
}

std::unique_ptr<Comm> make_mpi_comm(const std::vector<int>& world_ranks) {
    MPI_Comm out = MPI_COMM_NULL;
    if (world_ranks.empty()) {
        check(MPI_Comm_dup(MPI_COMM_WORLD, &out), "MPI_Comm_dup");
        return std::make_unique<MpiComm>(out);
    }
    const int W = world_size(), me = world_rank();
    std::vector<int> seen(W, 0);
    for (int r : world_ranks) {
        if (r < 0 || r >= W)
            throw std::invalid_argument("make_mpi_comm: rank " + std::to_string(r) + " outside world of " +
                                        std::to_string(W));
        if (seen[r]++) throw std::invalid_argument("make_mpi_comm: rank " + std::to_string(r) + " listed twice");
    }
    if (!seen[me])
        throw std::invalid_argument("make_mpi_comm: calling rank " + std::to_string(me) + " is not in the group");
    MPI_Group world_group, group;
    check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
    check(MPI_Group_incl(world_group, int(world_ranks.size()), world_ranks.data(), &group), "MPI_Group_incl");
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &out);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    check(rc, "MPI_Comm_create_group");
    return std::make_unique<MpiComm>(out);
}

}  // namespace llmtrain
