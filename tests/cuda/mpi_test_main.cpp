// tests/cuda/mpi_test_main.cpp — main() of the emulated Comm tests run under mpirun (test_nccl_comm,
// test_mpi_cuda_comm): MPI initialized (FUNNELED) around every test, and one exit status for the
// whole job: every rank fails when any rank had a failing test (the closing MPI_Allreduce also keeps
// a rank that skipped a test's work from finalizing while a peer still waits on it). test_cuda_gpu
// has tests/cuda/gpu_main.cpp instead.
#include <mpi.h>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    ::testing::InitGoogleTest(&argc, argv);
    const int failed = RUN_ALL_TESTS() != 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any_failed;
}
