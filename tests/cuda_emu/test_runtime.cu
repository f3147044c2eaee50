// tests/cuda_emu/test_runtime.cu — the runtime subset: allocations, copies, memsets, launch checks,
// errors and device properties. References: the bytes written on the host, closed-form layouts
// (pitched copies), and the documented CUDA error codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;

namespace {

/// The error code of `call` and the explanation it recorded.
#define EXPECT_CUDA_ERROR(call, code, needle)                                                   \
    do {                                                                                        \
        EXPECT_EQ((call), code);                                                                \
        EXPECT_NE(emu::last_error_message().find(needle), std::string::npos)                    \
            << "message lacks '" << (needle) << "': " << emu::last_error_message();             \
        EXPECT_EQ(cudaGetLastError(), code); /* API errors are the last error, not sticky */    \
        EXPECT_EQ(cudaGetLastError(), cudaSuccess);                                             \
    } while (0)

TEST(Runtime, MallocIsAlignedAndPoisoned) {
    for (size_t bytes : {1, 3, 1000, 4096}) {
        void* p = nullptr;
        ASSERT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
        std::vector<unsigned char> host(bytes, 0);
        ASSERT_EQ(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        for (unsigned char b : host) ASSERT_EQ(b, 0xFF);
        float f;
        std::memset(&f, 0xFF, sizeof f);
        EXPECT_TRUE(std::isnan(f));  // the poison reads as NaN in fp32 (and bf16)
        ASSERT_EQ(cudaFree(p), cudaSuccess);
    }
    void* p = reinterpret_cast<void*>(1);
    EXPECT_EQ(cudaMalloc(&p, 0), cudaSuccess);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
}

TEST(Runtime, FreeMisuseIsReported) {
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 512), cudaSuccess);
    EXPECT_CUDA_ERROR(cudaFree(static_cast<char*>(p) + 16), cudaErrorInvalidValue, "16 B into allocation");
    EXPECT_CUDA_ERROR(cudaFreeHost(p), cudaErrorInvalidValue, "not pinned host memory");
    ASSERT_EQ(cudaFree(p), cudaSuccess);
    EXPECT_CUDA_ERROR(cudaFree(p), cudaErrorInvalidValue, "double free");
    int on_stack = 0;
    EXPECT_CUDA_ERROR(cudaFree(&on_stack), cudaErrorInvalidValue, "not a pointer returned by cudaMalloc");
}

void leak_and_exit() {
    void* p = nullptr;
    cudaMalloc(&p, 123);
    std::exit(0);
}

TEST(RuntimeDeathTest, LeaksAreReportedAtExit) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(leak_and_exit(), ::testing::ExitedWithCode(0),
                "leak report: 1 allocation\\(s\\), 123 bytes never freed:\n  allocation #[0-9]+ \\(123 B device memory");
}

TEST(Runtime, MemoryStatsAndMemGetInfoTrackAllocations) {
    const emu::MemoryStats before = emu::memory_stats();
    size_t free0 = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
    EXPECT_EQ(total, size_t{80} << 30);
    void *d = nullptr, *h = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 1 << 20), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(&h, 1000), cudaSuccess);
    const emu::MemoryStats during = emu::memory_stats();
    EXPECT_EQ(during.device_allocations, before.device_allocations + 1);
    EXPECT_EQ(during.device_bytes, before.device_bytes + (1 << 20));
    EXPECT_EQ(during.pinned_allocations, before.pinned_allocations + 1);
    size_t free1 = 0;
    ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
    EXPECT_EQ(free0 - free1, size_t{1} << 20);
    ASSERT_EQ(cudaFree(d), cudaSuccess);
    ASSERT_EQ(cudaFreeHost(h), cudaSuccess);
    const emu::MemoryStats after = emu::memory_stats();
    EXPECT_EQ(after.device_allocations, before.device_allocations);
    EXPECT_EQ(after.pinned_allocations, before.pinned_allocations);
}

TEST(Runtime, EmulatedCapacityIsEnforced) {
    ASSERT_EQ(setenv("CUDA_EMU_DEVICE_MEMORY", "1M", 1), 0);
    void* p = nullptr;
    EXPECT_CUDA_ERROR(cudaMalloc(&p, 2 << 20), cudaErrorMemoryAllocation, "out of emulated device memory");
    ASSERT_EQ(setenv("CUDA_EMU_DEVICE_MEMORY", "lots", 1), 0);
    EXPECT_CUDA_ERROR(cudaMalloc(&p, 16), cudaErrorInvalidValue, "CUDA_EMU_DEVICE_MEMORY must be a byte count");
    ASSERT_EQ(unsetenv("CUDA_EMU_DEVICE_MEMORY"), 0);
}

TEST(Runtime, CopiesInEveryDirection) {
    const size_t n = 300;
    std::vector<int> src(n), back(n, -1), via_default(n, -1);
    std::iota(src.begin(), src.end(), 7);
    DeviceArray<int> a(n), b(n);
    ASSERT_EQ(cudaMemcpy(a.p, src.data(), n * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b.p, a.p, n * sizeof(int), cudaMemcpyDeviceToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(back.data(), b.p, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back, src);
    ASSERT_EQ(cudaMemcpy(via_default.data(), a.p, n * sizeof(int), cudaMemcpyDefault), cudaSuccess);
    EXPECT_EQ(via_default, src);
}

TEST(Runtime, CopyChecksNameTheBadSide) {
    std::vector<int> host(100);
    DeviceArray<int> dev(100);
    EXPECT_CUDA_ERROR(cudaMemcpy(host.data(), host.data(), 400, cudaMemcpyHostToDevice), cudaErrorInvalidValue,
                      "dst: ");
    EXPECT_CUDA_ERROR(cudaMemcpy(dev.p, dev.p, 400, cudaMemcpyHostToDevice), cudaErrorInvalidValue,
                      "src " );
    EXPECT_CUDA_ERROR(cudaMemcpy(host.data(), dev.p, 404, cudaMemcpyDeviceToHost), cudaErrorInvalidValue,
                      "runs 4 B past the end");
    EXPECT_CUDA_ERROR(cudaMemcpy(host.data(), host.data() + 1, 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue,
                      "plain host pointer");
    EXPECT_CUDA_ERROR(cudaMemcpy(host.data(), dev.p, 4, static_cast<cudaMemcpyKind>(7)),
                      cudaErrorInvalidMemcpyDirection, "invalid cudaMemcpyKind");
}

TEST(Runtime, PitchedCopies) {
    const size_t width = 12, height = 5, spitch = 20, dpitch = 32;  // bytes
    std::vector<unsigned char> src(spitch * height), out(dpitch * height, 0xAB);
    std::iota(src.begin(), src.end(), 0);
    DeviceArray<unsigned char> dev(dpitch * height);
    ASSERT_EQ(cudaMemset(dev.p, 0, dpitch * height), cudaSuccess);
    ASSERT_EQ(cudaMemcpy2D(dev.p, dpitch, src.data(), spitch, width, height, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy2D(out.data(), dpitch, dev.p, dpitch, dpitch, height, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t r = 0; r < height; ++r)
        for (size_t c = 0; c < dpitch; ++c)
            ASSERT_EQ(out[r * dpitch + c], c < width ? src[r * spitch + c] : 0) << r << "," << c;
    EXPECT_CUDA_ERROR(cudaMemcpy2D(dev.p, 8, src.data(), spitch, width, height, cudaMemcpyHostToDevice),
                      cudaErrorInvalidPitchValue, "width exceeds a pitch");
}

TEST(Runtime, Memset) {
    DeviceArray<unsigned char> dev(1000);
    ASSERT_EQ(cudaMemset(dev.p, 0x3c, 1000), cudaSuccess);
    ASSERT_EQ(cudaMemset(dev.p + 10, 0, 5), cudaSuccess);
    auto v = dev.download();
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(v[i], (i >= 10 && i < 15) ? 0 : 0x3c) << i;
    EXPECT_CUDA_ERROR(cudaMemset(dev.p, 0, 1001), cudaErrorInvalidValue, "past the end");
}

TEST(Runtime, PinnedAndRegisteredHostMemory) {
    float* pinned = nullptr;
    ASSERT_EQ(cudaMallocHost(&pinned, 64 * sizeof(float)), cudaSuccess);
    EXPECT_NO_THROW(emu::check_device_range(pinned, 64 * sizeof(float), "pinned"));
    void* mapped = nullptr;
    ASSERT_EQ(cudaHostGetDevicePointer(&mapped, pinned, 0), cudaSuccess);
    EXPECT_EQ(mapped, pinned);
    ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);

    std::vector<float> buf(64);
    EXPECT_THROW(emu::check_device_range(buf.data(), 4, "plain"), emu::Error);
    ASSERT_EQ(cudaHostRegister(buf.data(), buf.size() * sizeof(float), cudaHostRegisterDefault), cudaSuccess);
    EXPECT_NO_THROW(emu::check_device_range(buf.data() + 10, 40, "registered"));
    EXPECT_THROW(emu::check_device_range(buf.data() + 60, 40, "overrun"), emu::Error);
    EXPECT_CUDA_ERROR(cudaHostRegister(buf.data() + 8, 16, 0), cudaErrorHostMemoryAlreadyRegistered, "overlaps");
    ASSERT_EQ(cudaHostUnregister(buf.data()), cudaSuccess);
    EXPECT_CUDA_ERROR(cudaHostUnregister(buf.data()), cudaErrorHostMemoryNotRegistered, "not the start");
    EXPECT_FALSE(emu::is_device_accessible(buf.data()));
}

/// Pageable sources are staged when the copy is queued; pinned ones are read when it runs.
TEST(Runtime, AsyncHostToDeviceStagingFollowsCuda) {
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    DeviceArray<int> dev(4);
    std::vector<int> pageable{1, 2, 3, 4};
    ASSERT_EQ(cudaMemcpyAsync(dev.p, pageable.data(), 16, cudaMemcpyHostToDevice, s), cudaSuccess);
    pageable.assign({9, 9, 9, 9});  // allowed: the runtime already copied it
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(dev.download(), (std::vector<int>{1, 2, 3, 4}));

    int* pinned = nullptr;
    ASSERT_EQ(cudaMallocHost(&pinned, 16), cudaSuccess);
    for (int i = 0; i < 4; ++i) pinned[i] = i;
    ASSERT_EQ(cudaMemcpyAsync(dev.p, pinned, 16, cudaMemcpyHostToDevice, s), cudaSuccess);
    pinned[0] = 42;  // a race on a GPU; here the copy reads the new value, every time
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(dev.download(), (std::vector<int>{42, 1, 2, 3}));
    ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

__global__ void touch_kernel(float* x) { x[threadIdx.x] = 1.0f; }

TEST(Runtime, LaunchConfigurationIsChecked) {
    DeviceArray<float> x(2048);
    auto expect_launch_error = [](auto&& launch, cudaError_t code, const char* needle) {
        try {
            launch();
            ADD_FAILURE() << "launch accepted";
        } catch (const llmtrain::CudaError& e) {
            EXPECT_NE(std::string(e.what()).find(cudaGetErrorName(code)), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_launch_error([&] { llmtrain::launch(touch_kernel, 1, 1025, 0, nullptr, x.p); },
                        cudaErrorInvalidConfiguration, "1025 threads");
    expect_launch_error([&] { llmtrain::launch(touch_kernel, 1, dim3(8, 8, 65), 0, nullptr, x.p); },
                        cudaErrorInvalidConfiguration, "z <= 64");
    expect_launch_error([&] { llmtrain::launch(touch_kernel, 0, 32, 0, nullptr, x.p); },
                        cudaErrorInvalidConfiguration, "dimension is 0");
    expect_launch_error([&] { llmtrain::launch(touch_kernel, dim3(1, 65536), 32, 0, nullptr, x.p); },
                        cudaErrorInvalidConfiguration, "grid too large");
    expect_launch_error([&] { llmtrain::launch(touch_kernel, 1, 32, 48 * 1024 + 1, nullptr, x.p); },
                        cudaErrorInvalidValue, "cudaFuncSetAttribute");
    ASSERT_EQ(cudaFuncSetAttribute(touch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
              cudaSuccess);
    EXPECT_NO_THROW(llmtrain::launch(touch_kernel, 1, 1024, 100 * 1024, nullptr, x.p));
    EXPECT_CUDA_ERROR(cudaFuncSetAttribute(touch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 232449),
                      cudaErrorInvalidValue, "must be in [0, 232448]");
    cudaFuncAttributes attr{};
    ASSERT_EQ(cudaFuncGetAttributes(&attr, touch_kernel), cudaSuccess);
    EXPECT_EQ(attr.maxDynamicSharedSizeBytes, 100 * 1024);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

__global__ void faulting_kernel(float* x) {
    if (threadIdx.x == 0) return;
    x[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 0);
}

TEST(Runtime, KernelFaultsAreStickyUntilDeviceReset) {
    DeviceArray<float> x(32);
    llmtrain::launch(faulting_kernel, 1, 32, 0, nullptr, x.p);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorLaunchFailure);  // every call fails now
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // sticky: reading does not clear it
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(emu::memory_stats().device_allocations, 0u);  // the reset freed everything
    ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
    ASSERT_EQ(cudaFree(p), cudaSuccess);
}

TEST(Runtime, QueuedHostWorkThatThrowsBecomesTheStickyError) {
    emu::enqueue(nullptr, [] { throw emu::Error("collective failed on rank 3"); }, "ncclAllReduce");
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaErrorLaunchFailure);
    EXPECT_EQ(emu::last_error_message(), "ncclAllReduce: collective failed on rank 3");
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_THROW(emu::enqueue(s, [] {}, "after destroy"), emu::Error);
}

TEST(Runtime, DevicePropertiesDescribeAnH100) {
    int count = 0, device = -1;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    EXPECT_EQ(count, 1);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(device, 0);
    EXPECT_CUDA_ERROR(cudaSetDevice(1), cudaErrorInvalidDevice, "no such device");
    cudaDeviceProp p{};
    ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
    EXPECT_EQ(p.major, 9);
    EXPECT_EQ(p.minor, 0);
    EXPECT_EQ(p.multiProcessorCount, 132);
    EXPECT_EQ(p.warpSize, 32);
    EXPECT_EQ(p.maxThreadsPerBlock, 1024);
    EXPECT_EQ(p.sharedMemPerBlock, 48u * 1024);
    EXPECT_EQ(p.sharedMemPerBlockOptin, 232448u);
    int v = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    EXPECT_EQ(v, p.multiProcessorCount);
    ASSERT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
    EXPECT_EQ(v, 232448);
}

TEST(Runtime, ErrorNamesAndStrings) {
    EXPECT_STREQ(cudaGetErrorName(cudaSuccess), "cudaSuccess");
    EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
    EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
    EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
    EXPECT_STREQ(cudaGetErrorName(cudaErrorIllegalAddress), "cudaErrorIllegalAddress");
}

/// Run by ctest twice: without the variables (the default order) and with them set.
TEST(Runtime, OrderComesFromTheEnvironment) {
    const emu::Order want = emu::parse_order(std::getenv("CUDA_EMU_THREAD_ORDER"), std::getenv("CUDA_EMU_BLOCK_ORDER"));
    EXPECT_EQ(emu::to_string(emu::order()), emu::to_string(want));
}

TEST(Runtime, OrderParsing) {
    emu::Order o = emu::parse_order("random:17", "random:4");
    EXPECT_EQ(o.thread, emu::ThreadOrder::random);
    EXPECT_EQ(o.thread_seed, 17u);
    EXPECT_EQ(o.block, emu::BlockOrder::random);
    EXPECT_EQ(o.block_seed, 4u);
    EXPECT_EQ(emu::to_string(emu::parse_order("reverse", nullptr)), "thread=reverse block=sequential");
    EXPECT_EQ(emu::to_string(emu::parse_order("", "")), "thread=forward block=sequential");
    EXPECT_THROW(emu::parse_order("backwards", nullptr), emu::Error);
    EXPECT_THROW(emu::parse_order(nullptr, "random:x"), emu::Error);
}

}  // namespace
