// tests/cuda_emu/issue_order_fixture.cpp — the emulated NCCL's issue-order check (emu/nccl_check.cpp)
// on 2 ranks sharing two communicators, A and B, like a pipeline's activation and gradient links.
//   issue_order_fixture same     rank 0 sends on A then receives on B; rank 1 receives on A then
//                                sends on B: one order on both. Exits 0, printing "same order: ok".
//   issue_order_fixture crossed  rank 1 sends on B before it receives on A: its call on A is its
//                                second with rank 0, rank 0's the first. The check must end the job
//                                naming both ranks (ctest matches its message); on a GPU, with both
//                                communicators' kernels on one stream, this order deadlocks.
#include <cuda_runtime.h>
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // MPI's C API only: OpenMPI's deprecated C++ bindings need libmpi_cxx
#endif
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>

namespace {

void check(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "issue_order_fixture: %s failed\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

ncclComm_t make_comm(int rank) {
    ncclUniqueId id;
    if (rank == 0) check(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c = nullptr;
    check(ncclCommInitRank(&c, 2, id, rank) == ncclSuccess, "ncclCommInitRank");
    return c;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const bool crossed = argc > 1 && std::strcmp(argv[1], "crossed") == 0;
    check(size == 2 && argc > 1 && (crossed || std::strcmp(argv[1], "same") == 0),
          "usage: mpirun -np 2 issue_order_fixture same|crossed");
    ncclComm_t a = make_comm(rank), b = make_comm(rank);
    float *x = nullptr, *y = nullptr;
    check(cudaMalloc(&x, 16 * sizeof(float)) == cudaSuccess && cudaMalloc(&y, 16 * sizeof(float)) == cudaSuccess,
          "cudaMalloc");
    cudaStream_t s;
    check(cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate");
    if (rank == 0) {
        check(ncclSend(x, 16, ncclFloat32, 1, a, s) == ncclSuccess, "ncclSend on A");
        check(ncclRecv(y, 16, ncclFloat32, 1, b, s) == ncclSuccess, "ncclRecv on B");
    } else if (!crossed) {
        check(ncclRecv(x, 16, ncclFloat32, 0, a, s) == ncclSuccess, "ncclRecv on A");
        check(ncclSend(y, 16, ncclFloat32, 0, b, s) == ncclSuccess, "ncclSend on B");
    } else {
        check(ncclSend(y, 16, ncclFloat32, 0, b, s) == ncclSuccess, "ncclSend on B");
        check(ncclRecv(x, 16, ncclFloat32, 0, a, s) == ncclSuccess, "ncclRecv on A");
    }
    check(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
    ncclCommDestroy(a);
    ncclCommDestroy(b);
    if (rank == 0) std::printf("same order: ok\n");
    MPI_Finalize();
    return 0;
}
