// parallel/comm.hpp — ranks, groups and collectives (ARCHITECTURE.md "Ranks and groups").
//
// MPI gives rank and world. A Group is an ordered set of world ranks; a Comm runs collectives on
// one group. MpiComm moves host buffers (the CPU backend); NcclComm (CUDA) moves device buffers.
// Sums are reduced in rank order so every rank gets bit-identical results.
#pragma once
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <vector>

#include "model/ops.hpp"

namespace llmtrain {

/// An MPI call failed; what() names the call and MPI's error string.
struct CommError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Initializes MPI once (thread level FUNNELED) if not yet done; safe without mpirun (one rank).
void mpi_init_once(int* argc, char*** argv);
/// Finalizes MPI if we initialized it.
void mpi_finalize();
/// Ends every rank of the job with exit code `code` (MPI_Abort); a plain exit with one rank.
[[noreturn]] void mpi_abort(int code);
int world_rank();
int world_size();
/// Rank on this node (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, else 0): picks the device and metrics port.
int local_rank();

class Comm {
public:
    virtual ~Comm() = default;
    virtual int rank() const = 0;  ///< index in the group
    virtual int size() const = 0;
    /// In-place sum over the group of n elements of type t (f32 or bf16, bf16 summed in fp32).
    /// Every rank receives the bit-identical result of summing in rank order (0 + 1 + 2 ...).
    virtual void all_reduce_sum(void* buf, size_t n, DType t) = 0;
    /// In-place max of n fp32 values.
    virtual void all_reduce_max(float* buf, size_t n) = 0;
    virtual void broadcast(void* buf, size_t bytes, int root) = 0;
    virtual void barrier() = 0;
};

/// A Comm over MPI on the given world ranks, in that order (all ranks when empty). Collective over
/// the listed ranks: each of them calls it with the same list; other ranks need not call it.
/// Errors: std::invalid_argument if the calling rank is not listed or a rank is out of range or
/// repeated; CommError if MPI fails. Buffers are host memory.
std::unique_ptr<Comm> make_mpi_comm(const std::vector<int>& world_ranks = {});

}  // namespace llmtrain
