// tests/parallel/mpi_gtest_main.cpp — main() of the parallel tests that run under mpirun: MPI
// initialized once around every test (make_mpi_comm needs it), finalized at the end.
#include <gtest/gtest.h>

#include "parallel/comm.hpp"

int main(int argc, char** argv) {
    llmtrain::mpi_init_once(&argc, &argv);
    ::testing::InitGoogleTest(&argc, argv);
    const int rc = RUN_ALL_TESTS();
    llmtrain::mpi_finalize();
    return rc;
}
