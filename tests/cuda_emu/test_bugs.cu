// tests/cuda_emu/test_bugs.cu — bug fixtures the emulator must catch, each with its fixed twin.
//
// A missing __syncthreads (results differ between thread orders), a divergent __syncthreads, warp
// operations with wrong masks, a host pointer passed to a kernel, a host read of an asynchronous
// device-to-host copy before its sync, a missing cudaStreamWaitEvent between two streams, and the
// same between a compute stream and the stream of an NCCL all-reduce. The reference for the fixed
// twins is the closed-form result.
#include <gtest/gtest.h>
#include <nccl.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;
using emu_test::expect_fault;
using emu_test::ScopedOrder;

namespace {

constexpr int kThreads = 128, kBlocks = 8, kN = kThreads * kBlocks;

std::vector<float> iota_input() {
    std::vector<float> v(kN);
    for (int i = 0; i < kN; ++i) v[i] = static_cast<float>(i);
    return v;
}

// ---- 1. missing __syncthreads ----

/// out[i] = in[next thread of the block]. BUG: no barrier between the writes and the reads.
__global__ void rotate_racy(float* out, const float* in) {
    __shared__ float s[kThreads];
    const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    s[t] = in[base + t];
    out[base + t] = s[(t + 1) % blockDim.x];
}
__global__ void rotate_fixed(float* out, const float* in) {
    __shared__ float s[kThreads];
    const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    s[t] = in[base + t];
    __syncthreads();
    out[base + t] = s[(t + 1) % blockDim.x];
}

std::vector<float> run_rotate(void (*kernel)(float*, const float*), const char* order) {
    ScopedOrder scoped(order);
    DeviceArray<float> in(iota_input()), out(kN);
    llmtrain::launch(kernel, kBlocks, kThreads, 0, nullptr, out.p, in.p);
    return out.download();
}

TEST(Bugs, MissingSyncthreadsGivesDifferentResultsUnderForwardAndReverseOrder) {
    std::vector<float> want(kN);
    for (int i = 0; i < kN; ++i) want[i] = static_cast<float>(i / kThreads * kThreads + (i % kThreads + 1) % kThreads);
    for (const char* order : emu_test::kThreadOrders) EXPECT_EQ(run_rotate(rotate_fixed, order), want) << order;
    // Forward: thread t reads s[t+1] before thread t+1 wrote it (the previous block's value).
    EXPECT_NE(run_rotate(rotate_racy, "forward"), run_rotate(rotate_racy, "reverse"));
    EXPECT_NE(run_rotate(rotate_racy, "forward"), want);
}

// ---- 2. divergent __syncthreads ----

/// BUG: the two halves of the block wait at different barriers.
__global__ void divergent_barrier(float* out) {
    if (threadIdx.x < 16) {
        out[threadIdx.x] = 1.0f;
        __syncthreads();
    } else {
        __syncthreads();
        out[threadIdx.x] = 2.0f;
    }
}

TEST(Bugs, DivergentSyncthreadsIsReported) {
    for (const char* order : emu_test::kThreadOrders) {
        ScopedOrder scoped(order);
        DeviceArray<float> out(64);
        llmtrain::launch(divergent_barrier, 1, 64, 0, nullptr, out.p);
        std::string report = expect_fault("divergent __syncthreads()");
        EXPECT_NE(report.find("divergent_barrier"), std::string::npos) << report;  // names the kernel
        EXPECT_NE(report.find("test_bugs.cu:"), std::string::npos) << report;      // and the barriers
    }
}

// ---- 3. warp operations with wrong masks ----

/// BUG: every lane calls with the lower half's mask (lanes 16-31 are not in their own mask).
__global__ void mask_without_caller(float* out) {
    float v = threadIdx.x;
    for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(0x0000ffffu, v, offset);
    out[threadIdx.x] = v;
}
/// BUG: the lower half reads lanes 16-31, which are outside its mask.
__global__ void source_outside_mask(float* out) {
    float v = threadIdx.x;
    if (threadIdx.x < 16) v += __shfl_xor_sync(0x0000ffffu, v, 16);
    out[threadIdx.x] = v;
}
/// BUG: lanes 16-31 leave early, the rest shuffle with the full mask (a hang on a GPU).
__global__ void mask_names_exited_lanes(float* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f * threadIdx.x, 1);
}
/// Fixed: the full mask, all lanes present.
__global__ void full_mask_reduction(float* out) {
    float v = threadIdx.x;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    out[threadIdx.x] = v;
}

TEST(Bugs, WarpOperationsWithWrongMasksAreReported) {
    DeviceArray<float> out(32);
    llmtrain::launch(full_mask_reduction, 1, 32, 0, nullptr, out.p);
    EXPECT_EQ(out.download(), std::vector<float>(32, 31 * 32 / 2));

    for (const char* order : emu_test::kThreadOrders) {
        ScopedOrder scoped(order);
        DeviceArray<float> o(32);
        llmtrain::launch(mask_without_caller, 1, 32, 0, nullptr, o.p);
        expect_fault("a mask without its own lane");
    }
    {
        DeviceArray<float> o(32);
        llmtrain::launch(source_outside_mask, 1, 32, 0, nullptr, o.p);
        expect_fault("which is not in the mask");
    }
    {
        DeviceArray<float> o(32);
        llmtrain::launch(mask_names_exited_lanes, 1, 32, 0, nullptr, o.p);
        std::string report = expect_fault("has exited");
        // The deadlock report lists every thread's state.
        EXPECT_NE(report.find("threads 0-15: waiting in __shfl_down_sync(mask=0xffffffff)"), std::string::npos)
            << report;
        EXPECT_NE(report.find("threads 16-31: exited"), std::string::npos) << report;
    }
}

/// BUG: a warp shuffle in a block of 48 threads with the full mask (lanes 48-63 do not exist).
__global__ void mask_beyond_block(float* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1); }

TEST(Bugs, FullMaskInAPartialWarpIsReported) {
    DeviceArray<float> out(48);
    llmtrain::launch(mask_beyond_block, 1, 48, 0, nullptr, out.p);
    expect_fault("beyond the block's 48 threads");
}

// ---- 4. a host pointer passed to a kernel ----

__global__ void scale_kernel(float* x, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

TEST(Bugs, HostPointerPassedToAKernelIsReported) {
    std::vector<float> host(100, 1.0f);
    try {
        llmtrain::launch(scale_kernel, 1, 128, 0, nullptr, host.data(), 2.0f, 100);
        FAIL() << "the launch accepted a host pointer";
    } catch (const llmtrain::CudaError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("cudaErrorIllegalAddress"), std::string::npos) << msg;
        EXPECT_NE(msg.find("argument 0"), std::string::npos) << msg;
        EXPECT_NE(msg.find("scale_kernel"), std::string::npos) << msg;
        EXPECT_NE(msg.find("plain host pointer"), std::string::npos) << msg;
    }
    EXPECT_EQ(host, std::vector<float>(100, 1.0f));  // nothing ran
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);     // the launch error was consumed

    float* freed = nullptr;
    CUDA_CHECK(cudaMalloc(&freed, 100 * sizeof(float)));
    CUDA_CHECK(cudaFree(freed));
    EXPECT_THROW(llmtrain::launch(scale_kernel, 1, 128, 0, nullptr, freed, 2.0f, 100), llmtrain::CudaError);
    EXPECT_NE(emu::last_error_message().find("which was freed"), std::string::npos) << emu::last_error_message();

    // Device and pinned host memory are accepted.
    DeviceArray<float> dev(std::vector<float>(100, 1.0f));
    float* pinned = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, 100 * sizeof(float)));
    std::fill(pinned, pinned + 100, 3.0f);
    llmtrain::launch(scale_kernel, 1, 128, 0, nullptr, dev.p, 2.0f, 100);
    llmtrain::launch(scale_kernel, 1, 128, 0, nullptr, pinned, 2.0f, 100);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(dev.download(), std::vector<float>(100, 2.0f));
    EXPECT_EQ(std::vector<float>(pinned, pinned + 100), std::vector<float>(100, 6.0f));
    CUDA_CHECK(cudaFreeHost(pinned));
}

// ---- 5. a host read of an async device-to-host copy before its sync ----

__global__ void fill_kernel(float* x, float v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

TEST(Bugs, HostReadBeforeSyncSeesThePoison) {
    const int n = 1000;
    DeviceArray<float> dev(n);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    for (bool pinned : {false, true}) {
        std::vector<float> pageable(n, 0.0f);
        float* host = pageable.data();
        if (pinned) CUDA_CHECK(cudaMallocHost(&host, n * sizeof(float)));
        llmtrain::launch(fill_kernel, (n + 127) / 128, 128, 0, s, dev.p, 4.5f, n);
        CUDA_CHECK(cudaMemcpyAsync(host, dev.p, n * sizeof(float), cudaMemcpyDeviceToHost, s));
        for (int i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(host[i])) << "element " << i << " before the sync";
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; ++i) ASSERT_EQ(host[i], 4.5f) << "element " << i << " after the sync";
        if (pinned) CUDA_CHECK(cudaFreeHost(host));
    }
    CUDA_CHECK(cudaStreamDestroy(s));
}

// ---- 6. a missing cudaStreamWaitEvent between two streams ----

__global__ void copy_kernel(float* dst, const float* src, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

/// Producer on `a` fills buf; consumer on `b` copies it; the host reads the copy after syncing b
/// (or the whole device). Returns what the host saw.
std::vector<float> produce_consume(bool wait_event, bool device_sync) {
    const int n = 256;
    DeviceArray<float> buf(n), out(n);
    cudaStream_t a, b;
    cudaEvent_t produced;
    CUDA_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    llmtrain::launch(fill_kernel, 2, 128, 0, a, buf.p, 7.0f, n);
    CUDA_CHECK(cudaEventRecord(produced, a));
    if (wait_event) CUDA_CHECK(cudaStreamWaitEvent(b, produced, 0));
    llmtrain::launch(copy_kernel, 2, 128, 0, b, out.p, buf.p, n);
    std::vector<float> host(n);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), out.p, n * sizeof(float), cudaMemcpyDeviceToHost, b));
    CUDA_CHECK(device_sync ? cudaDeviceSynchronize() : cudaStreamSynchronize(b));
    CUDA_CHECK(cudaEventDestroy(produced));
    CUDA_CHECK(cudaStreamDestroy(a));
    CUDA_CHECK(cudaStreamDestroy(b));
    return host;
}

TEST(Bugs, MissingStreamWaitEventIsExposed) {
    for (bool device_sync : {false, true}) {
        EXPECT_EQ(produce_consume(true, device_sync), std::vector<float>(256, 7.0f));
        // Without the wait the consumer runs before the producer and copies the poison.
        for (float v : produce_consume(false, device_sync)) ASSERT_TRUE(std::isnan(v)) << "device_sync " << device_sync;
    }
}

// ---- 7. a missing wait between the compute stream and the comm stream ----

/// A kernel on the compute stream fills buf with 3; an NCCL sum over a one-rank communicator on
/// the comm stream copies it to out; the host reads out after syncing the comm stream (or the whole
/// device). Returns what the host saw. The emulator runs an NCCL call when its stream reaches it,
/// so without the event wait the all-reduce reads buf before the kernel has written it.
std::vector<float> compute_then_all_reduce(ncclComm_t comm, bool wait_event, bool device_sync) {
    const int n = 256;
    DeviceArray<float> buf(n), out(n);
    cudaStream_t compute, comm_stream;
    cudaEvent_t produced;
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    llmtrain::launch(fill_kernel, 2, 128, 0, compute, buf.p, 3.0f, n);
    CUDA_CHECK(cudaEventRecord(produced, compute));
    if (wait_event) CUDA_CHECK(cudaStreamWaitEvent(comm_stream, produced, 0));
    EXPECT_EQ(ncclAllReduce(buf.p, out.p, n, ncclFloat32, ncclSum, comm, comm_stream), ncclSuccess);
    std::vector<float> host(n);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), out.p, n * sizeof(float), cudaMemcpyDeviceToHost, comm_stream));
    CUDA_CHECK(device_sync ? cudaDeviceSynchronize() : cudaStreamSynchronize(comm_stream));
    CUDA_CHECK(cudaEventDestroy(produced));
    CUDA_CHECK(cudaStreamDestroy(compute));
    CUDA_CHECK(cudaStreamDestroy(comm_stream));
    return host;
}

TEST(Bugs, MissingWaitBeforeAnNcclCollectiveIsExposed) {
    ncclUniqueId id;
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);  // one rank: MPI starts as a singleton
    ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
    for (bool device_sync : {false, true}) {
        EXPECT_EQ(compute_then_all_reduce(comm, true, device_sync), std::vector<float>(256, 3.0f));
        // Without the wait the all-reduce runs first and sums the poison of the fresh allocation.
        for (float v : compute_then_all_reduce(comm, false, device_sync))
            ASSERT_TRUE(std::isnan(v)) << "device_sync " << device_sync;
    }
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ---- out-of-bounds and use-after-free accesses inside a kernel ----

/// Reads x[i + offset]: with a large offset, beyond the allocation.
__global__ void read_at_offset(float* out, const float* x, int offset) { out[threadIdx.x] = x[threadIdx.x + offset]; }

/// A pointer hidden in a struct is not checked at launch, only when dereferenced.
struct View {
    const float* data;
};
__global__ void read_view(float* out, View v) { out[threadIdx.x] = v.data[threadIdx.x]; }

void read_past_the_end() {
    DeviceArray<float> x(100), out(32);
    llmtrain::launch(read_at_offset, 1, 32, 0, nullptr, out.p, x.p, 150);  // 200 B past the padding
    cudaDeviceSynchronize();
}

void read_after_free() {
    float* x = nullptr;
    DeviceArray<float> out(32);
    CUDA_CHECK(cudaMalloc(&x, 32 * sizeof(float)));
    CUDA_CHECK(cudaFree(x));
    llmtrain::launch(read_view, 1, 32, 0, nullptr, out.p, View{x});
    cudaDeviceSynchronize();
}

TEST(BugsDeathTest, OutOfBoundsReadInAKernelIsReported) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(read_past_the_end(), "illegal address .* B past the end of allocation #[0-9]+ \\(400 B device memory");
}

TEST(BugsDeathTest, UseAfterFreeInAKernelIsReported) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(read_after_free(),
                 "illegal address .* which was freed; accessed by kernel thread \\(0,0,0\\) of block \\(0,0,0\\)");
}

/// Within bounds and after the sync that cudaFree implies, the same kernels are fine.
TEST(Bugs, FreeWaitsForQueuedKernels) {
    float* x = nullptr;
    DeviceArray<float> out(32);
    CUDA_CHECK(cudaMalloc(&x, 32 * sizeof(float)));
    CUDA_CHECK(cudaMemset(x, 0, 32 * sizeof(float)));
    llmtrain::launch(read_view, 1, 32, 0, nullptr, out.p, View{x});
    CUDA_CHECK(cudaFree(x));  // runs the kernel first
    EXPECT_EQ(out.download(), std::vector<float>(32, 0.0f));
}

}  // namespace
