// tests/cuda_emu/test_streams.cu — deferred streams and events: work runs only at synchronization
// points, in stream order, with CUDA's default-stream and event ordering. The emulator's device
// memory is host memory, so the tests can look at it before a sync (white box) to prove that
// nothing ran early; the expected values are closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;

namespace {

__global__ void affine_kernel(float* x, float a, float b, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}
__global__ void fill_kernel(float* x, float v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

/// Reads device memory directly (the emulator's device memory is host memory).
float peek(const float* device_ptr) {
    float v;
    std::memcpy(&v, device_ptr, sizeof v);
    return v;
}

TEST(Streams, WorkRunsOnlyAtSynchronizationInStreamOrder) {
    const int n = 100;
    DeviceArray<float> x(n);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(x.p, 0, n * sizeof(float), s), cudaSuccess);
    for (int k = 0; k < 5; ++k) llmtrain::launch(affine_kernel, 1, 128, 0, s, x.p, 2.0f, 1.0f, n);
    EXPECT_TRUE(std::isnan(peek(x.p)));  // still the poison: nothing ran
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(peek(x.p), 31.0f);  // ((((0*2+1)*2+1)*2+1)*2+1)*2+1
    EXPECT_EQ(x.download(), std::vector<float>(n, 31.0f));
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(Streams, EventSynchronizeRunsUpToTheEventOnly) {
    DeviceArray<float> a(32), b(32);
    cudaStream_t s;
    cudaEvent_t e;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
    llmtrain::launch(fill_kernel, 1, 32, 0, s, a.p, 1.0f, 32);
    ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
    llmtrain::launch(fill_kernel, 1, 32, 0, s, b.p, 2.0f, 32);
    ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
    EXPECT_EQ(peek(a.p), 1.0f);
    EXPECT_TRUE(std::isnan(peek(b.p)));
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(peek(b.p), 2.0f);
    ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(Streams, QueriesReportNotReadyThenMakeProgress) {
    DeviceArray<float> a(32);
    cudaStream_t s;
    cudaEvent_t e;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);  // empty
    EXPECT_EQ(cudaEventQuery(e), cudaSuccess);   // never recorded
    llmtrain::launch(fill_kernel, 1, 32, 0, s, a.p, 3.0f, 32);
    ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
    EXPECT_EQ(cudaEventQuery(e), cudaSuccess);  // a polling loop terminates
    EXPECT_EQ(peek(a.p), 3.0f);
    llmtrain::launch(fill_kernel, 1, 32, 0, s, a.p, 4.0f, 32);
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
    EXPECT_EQ(peek(a.p), 4.0f);
    ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

/// The legacy default stream waits for blocking streams (and they for it), not for non-blocking ones.
TEST(Streams, LegacyDefaultStreamOrdering) {
    for (unsigned flags : {unsigned{cudaStreamDefault}, unsigned{cudaStreamNonBlocking}}) {
        DeviceArray<float> x(64);
        cudaStream_t s;
        ASSERT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
        llmtrain::launch(fill_kernel, 1, 64, 0, s, x.p, 5.0f, 64);
        std::vector<float> host(64);
        ASSERT_EQ(cudaMemcpy(host.data(), x.p, 64 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
        if (flags == cudaStreamDefault) EXPECT_EQ(host, std::vector<float>(64, 5.0f));
        else EXPECT_TRUE(std::isnan(host[0]));  // the blocking copy did not wait for s
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

        // Work on the legacy stream, then on s: s waits for it only when s is blocking.
        llmtrain::launch(fill_kernel, 1, 64, 0, nullptr, x.p, 10.0f, 64);
        llmtrain::launch(affine_kernel, 1, 64, 0, s, x.p, 1.0f, 1.0f, 64);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        if (flags == cudaStreamDefault) {
            EXPECT_EQ(peek(x.p), 11.0f);  // the fill, then +1
        } else {
            EXPECT_EQ(peek(x.p), 6.0f);  // s ran alone: 5 + 1
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            EXPECT_EQ(peek(x.p), 10.0f);  // then the legacy fill
        }
        ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
    }
}

void CUDART_CB append(void* user) { static_cast<std::vector<int>*>(user)->push_back(static_cast<int>(user != nullptr)); }

struct Log {
    std::vector<int> order;
    int next = 0;
};
void CUDART_CB log_step(void* user) {
    auto* log = static_cast<Log*>(user);
    log->order.push_back(log->next++);
}

TEST(Streams, HostFunctionsRunInStreamOrderAtTheSync) {
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    Log log;
    DeviceArray<float> x(32);
    for (int k = 0; k < 3; ++k) {
        ASSERT_EQ(cudaLaunchHostFunc(s, log_step, &log), cudaSuccess);
        llmtrain::launch(fill_kernel, 1, 32, 0, s, x.p, 1.0f * k, 32);
    }
    EXPECT_TRUE(log.order.empty());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(log.order, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(peek(x.p), 2.0f);
    std::vector<int> v;
    ASSERT_EQ(cudaLaunchHostFunc(s, append, &v), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(v, std::vector<int>{1});
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(Streams, ElapsedTimeBetweenEvents) {
    cudaEvent_t start, stop, untimed;
    ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
    DeviceArray<float> x(1 << 16);
    ASSERT_EQ(cudaEventRecord(start, nullptr), cudaSuccess);
    llmtrain::launch(fill_kernel, 256, 256, 0, nullptr, x.p, 1.0f, 1 << 16);
    ASSERT_EQ(cudaEventRecord(stop, nullptr), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(untimed, nullptr), cudaSuccess);
    float ms = -1;
    EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaErrorNotReady);
    ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
    ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
    EXPECT_GE(ms, 0.0f);
    ASSERT_EQ(cudaEventSynchronize(untimed), cudaSuccess);
    EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    for (cudaEvent_t e : {start, stop, untimed}) ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
}

TEST(Streams, InvalidHandlesAreRejected) {
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
    DeviceArray<float> x(32);
    EXPECT_EQ(cudaMemsetAsync(x.p, 0, 128, s), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    EXPECT_THROW(llmtrain::launch(fill_kernel, 1, 32, 0, s, x.p, 1.0f, 32), llmtrain::CudaError);
    cudaEvent_t e;
    ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
    ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(e, nullptr), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, 0x80), cudaErrorInvalidValue);
    cudaGetLastError();
}

/// An event destroyed while its record is still queued: the record still orders the stream.
TEST(Streams, EventDestroyedBeforeItsMarkerRuns) {
    cudaStream_t a, b;
    ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    DeviceArray<float> x(32);
    cudaEvent_t e;
    ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    llmtrain::launch(fill_kernel, 1, 32, 0, a, x.p, 8.0f, 32);
    ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
    ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
    llmtrain::launch(affine_kernel, 1, 32, 0, b, x.p, 1.0f, 1.0f, 32);
    ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
    EXPECT_EQ(peek(x.p), 9.0f);
    ASSERT_EQ(cudaStreamDestroy(a), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

TEST(Streams, StreamOrderedAllocation) {
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    float* p = nullptr;
    ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&p), 64 * sizeof(float), s), cudaSuccess);
    llmtrain::launch(fill_kernel, 1, 64, 0, s, p, 2.5f, 64);
    std::vector<float> host(64);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), p, 64 * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
    ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
    EXPECT_TRUE(emu::is_device_memory(p));  // freed in stream order, not yet
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_FALSE(emu::is_device_memory(p));
    EXPECT_EQ(host, std::vector<float>(64, 2.5f));
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

}  // namespace
