// tests/cuda/gpu_main.cpp — main() of test_cuda_gpu, the CUDA tests linked with the real (nvcc)
// backend: exit code 77 (ctest: skipped) when no GPU is present, else every GoogleTest test.
#include <cstdio>

#include <gtest/gtest.h>

#include "model/cuda/cuda_backend.hpp"

int main(int argc, char** argv) {
    if (llmtrain::cuda_device_count() == 0) {
        std::printf("test_cuda_gpu: no CUDA device, skipped\n");
        return 77;
    }
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
