// tests/cuda/gpu_main.cpp — main() of test_cuda_gpu, the CUDA tests linked with the real (nvcc)
// backend. Lists its tests anywhere (--gtest_list_tests: ctest's one entry per case is discovered
// on the build machine); otherwise exits 77 (ctest: skipped) when no GPU is present, and 77 when
// every test it ran skipped itself (GTEST_SKIP, e.g. the emulator-only byte count), else the status
// of every selected GoogleTest test. The Comm tests (test_nccl_comm.cpp, test_mpi_cuda_comm.cpp)
// start MPI themselves (one rank without mpirun) when they run; it is finalized here.
#include <cstdio>

#include <gtest/gtest.h>

#include "model/cuda/cuda_backend.hpp"
#include "parallel/comm.hpp"
#include "tests/gtest_skip.hpp"

int main(int argc, char** argv) {
    testing::InitGoogleTest(&argc, argv);
    if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();
    if (llmtrain::cuda_device_count() == 0) {
        std::printf("test_cuda_gpu: no CUDA device, skipped\n");
        return llmtrain::testing_util::kSkipExitCode;
    }
    const int rc = llmtrain::testing_util::run_all_tests_reporting_skips();
    llmtrain::mpi_finalize();
    return rc;
}
