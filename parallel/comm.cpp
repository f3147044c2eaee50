// parallel/comm.cpp — the backend-independent parts of parallel/comm.hpp: operation names and
// make_comm, which picks the Comm for a backend.
//
// The CUDA hooks: make_nccl_comm and make_mpi_cuda_comm are referenced weakly (as model/backend.cpp
// does for the CUDA backend). Each resolves only in executables that link its object file;
// elsewhere its address is null and the choice is refused with a clear message, so CPU-only
// binaries need neither NCCL nor the CUDA runtime.
#include <stdexcept>
#include <string>

#include "parallel/comm.hpp"

namespace llmtrain {

std::unique_ptr<Comm> make_nccl_comm(Ops& ops, const std::vector<int>& world_ranks, const CommOptions& opt)
    __attribute__((weak));
std::unique_ptr<Comm> make_mpi_cuda_comm(Ops& ops, const std::vector<int>& world_ranks, const CommOptions& opt)
    __attribute__((weak));

const char* comm_op_name(CommOp op) {
    switch (op) {
        case CommOp::all_reduce: return "all_reduce";
        case CommOp::reduce_scatter: return "reduce_scatter";
        case CommOp::all_gather: return "all_gather";
        case CommOp::broadcast: return "broadcast";
        case CommOp::send: return "send";
        case CommOp::recv: return "recv";
        case CommOp::all_to_all: return "all_to_all";
        case CommOp::count: break;
    }
    throw std::invalid_argument("comm_op_name: not an operation: " + std::to_string(static_cast<int>(op)));
}

std::string Comm::describe() const {
    std::string s = "world ranks [";
    for (size_t i = 0; i < world_ranks().size(); ++i) s += (i ? ", " : "") + std::to_string(world_ranks()[i]);
    return s + "]";
}

void Comm::check_peer(int peer, const char* role) const {
    if (peer < 0 || peer >= size())
        throw std::invalid_argument(std::string(role) + " " + std::to_string(peer) + " is not a group index in [0, " +
                                    std::to_string(size()) + ") of the group on " + describe());
}

void broadcast_string(Comm& comm, std::string& s, int root) {
    uint64_t n = s.size();
    comm.broadcast(&n, sizeof n, DType::u8, root);
    s.resize(n);
    comm.broadcast(s.data(), n, DType::u8, root);
}

std::string ranks_text(const std::vector<int>& ranks, const char* sep) {
    std::string s = "[";
    for (size_t i = 0; i < ranks.size(); ++i) s += (i ? sep : "") + std::to_string(ranks[i]);
    return s + "]";
}

std::unique_ptr<Comm> make_comm(Ops& ops, const std::vector<int>& world_ranks, const CommOptions& opt) {
    if (opt.comm != "auto" && opt.comm != "nccl" && opt.comm != "mpi")
        throw std::invalid_argument("make_comm: parallel.comm: expected \"auto\", \"nccl\" or \"mpi\", got \"" +
                                    opt.comm + "\"");
    if (std::string(ops.name()) != "cuda") {
        if (opt.comm == "nccl")
            throw std::invalid_argument(std::string("make_comm: parallel.comm = \"nccl\" needs the cuda backend, "
                                                    "got \"") + ops.name() + "\" (use \"mpi\" or \"auto\")");
        return make_mpi_comm(world_ranks, opt);
    }
    if (opt.comm == "mpi") {
        if (&make_mpi_cuda_comm == nullptr)
            throw std::runtime_error("make_comm: parallel.comm = \"mpi\" on the cuda backend needs MpiCudaComm, and "
                                     "this executable was linked without it");
        return make_mpi_cuda_comm(ops, world_ranks, opt);
    }
    if (&make_nccl_comm == nullptr)
        throw std::runtime_error("make_comm: backend \"cuda\" needs NCCL, and this build has no NCCL Comm (this "
                                 "executable was linked without it; parallel.comm = \"mpi\" needs no NCCL)");
    return make_nccl_comm(ops, world_ranks, opt);
}

}  // namespace llmtrain

namespace llmtrain {

namespace {

class DryComm final : public Comm {
public:
    DryComm(int size, int rank) : size_(size), rank_(rank) {
        for (int r = 0; r < size; ++r) ranks_.push_back(r);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::vector<int>& world_ranks() const override { return ranks_; }
    CommHandle all_reduce_sum_async(void*, size_t, DType) override { fail(); }
    CommHandle reduce_scatter_sum_async(const void*, void*, size_t, DType) override { fail(); }
    CommHandle all_gather_async(const void*, void*, size_t, DType) override { fail(); }
    CommHandle broadcast_async(void*, size_t, DType, int) override { fail(); }
    CommHandle send_async(const void*, size_t, DType, int) override { fail(); }
    CommHandle recv_async(void*, size_t, DType, int) override { fail(); }
    void all_reduce_max(float*, size_t) override { fail(); }
    void barrier() override { fail(); }

private:
    [[noreturn]] static void fail() { throw std::logic_error("dry-run Comm: no communication in a dry run"); }
    int size_, rank_;
    std::vector<int> ranks_;
};

}  // namespace

std::unique_ptr<Comm> make_dry_comm(int size, int rank) { return std::make_unique<DryComm>(size, rank); }

}  // namespace llmtrain
