// tests/cuda/gpu_or_skip.c — the launcher ctest runs each cuda_gpu.* case through (test_cuda_gpu's
// CROSSCOMPILING_EMULATOR, tests/cuda/CMakeLists.txt). Where the CUDA driver library (libcuda.so.1,
// which the CUDA runtime loads to see any device) cannot be loaded, no CUDA device can be seen:
// it prints test_cuda_gpu's own skip line and exits 77 (ctest: skipped) without starting the
// binary, whose CUDA libraries (cuBLAS, cuDNN, NCCL) take ~0.5 s to load on 2 cores: ~250 cases
// skipped that way cost two minutes of a CI run (docs/testing.md "Time budget"). Everywhere else,
// and always for --gtest_list_tests (ctest's discovery after the build, which needs no GPU), it
// execs the binary unchanged, which then decides itself (gpu_main.cpp: cudaGetDeviceCount).
// So it skips only where the binary would: never a case that would have run.
// Usage: gpu_or_skip <test_cuda_gpu> [its arguments...]; exit 77 (skipped), 2 (usage, exec failed),
// else the binary's status. LLMTRAIN_CUDA_LIB_DIR (compile definition): the toolkit's library
// directory, also tried (a driver library placed beside the runtime's).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef LLMTRAIN_CUDA_LIB_DIR
#define LLMTRAIN_CUDA_LIB_DIR ""
#endif

static int driver_loadable(void) {
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h && LLMTRAIN_CUDA_LIB_DIR[0]) h = dlopen(LLMTRAIN_CUDA_LIB_DIR "/libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return 0;
    dlclose(h);
    return 1;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_or_skip <test_cuda_gpu> [arguments...]\n");
        return 2;
    }
    int listing = 0;
    for (int i = 2; i < argc; ++i) listing |= strcmp(argv[i], "--gtest_list_tests") == 0;
    if (!listing && !driver_loadable()) {
        printf("test_cuda_gpu: no CUDA device, skipped\n");  // gpu_main.cpp's line
        return 77;
    }
    execv(argv[1], argv + 1);
    perror(argv[1]);
    return 2;
}
