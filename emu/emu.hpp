// emu/emu.hpp — the emulator's C++ API for the emulated libraries (cuBLAS, NCCL) and tests.
//
// cuda_emu runs CUDA code on the CPU (see docs/cuda_emu.md). The extern "C" runtime functions
// (cudaMalloc, cudaMemcpyAsync, ...) are its public face; this header is what code *inside* the
// emulator needs beyond them: queueing host work on a deferred stream, checking that a pointer is
// emulated device memory, poisoning host destinations, choosing thread and block orders, and
// reading the detailed message behind the last error.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace emu {

/// Every error the emulator throws: a bad pointer, a bad stream handle, a misused API.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// ---- deferred streams ----

/// Queues host work on `stream`; it runs at the next synchronization point that covers it
/// (stream, event or device sync, a blocking copy, or a stream that waits on an event after it),
/// in stream order. Stream 0 and cudaStreamLegacy are the legacy default stream (ordered against
/// every blocking stream), cudaStreamPerThread a blocking stream of its own. `what` names the work
/// in error messages (e.g. "cublasGemmEx"). If `work` throws, the exception's message becomes the
/// device's sticky error (cudaErrorLaunchFailure), printed to stderr and returned by the call that
/// synchronized. Errors: throws emu::Error for a stream that was never created or is destroyed.
void enqueue(cudaStream_t stream, std::function<void()> work, const char* what);

// ---- memory ----

/// Returns when [p, p+bytes) lies inside one live emulated device allocation (cudaMalloc) or
/// pinned host allocation (cudaMallocHost, cudaHostAlloc, cudaHostRegister). bytes == 0 accepts
/// any p. Errors: throws emu::Error naming `what`, the pointer and the nearest allocation (plain
/// host memory, freed memory, or a range that runs past the allocation's end).
void check_device_range(const void* p, size_t bytes, const char* what);

/// True when p points into (or one past the end of) a live device or pinned host allocation.
bool is_device_accessible(const void* p);

/// True when p points into a live cudaMalloc allocation (not pinned host memory).
bool is_device_memory(const void* p);

/// Fills a host destination with 0xFF bytes (NaN as fp32, bf16 and fp16; -1 as integers). Device
/// to host copies call it when they are queued, so a host read before the sync sees NaN.
void poison_host(void* p, size_t bytes);

/// Live device allocations (count and bytes) and pinned host allocations, for leak checks in tests.
struct MemoryStats {
    size_t device_allocations = 0, device_bytes = 0;
    size_t pinned_allocations = 0, pinned_bytes = 0;
};
MemoryStats memory_stats();

// ---- call counts ----

/// How many times some calls ran in this process: the host-blocking runtime calls, and cuBLASLt's
/// descriptor, heuristic and matmul calls. Tests take two snapshots around the code they check
/// (a training step must not synchronize the whole device; a cached GEMM must not create
/// descriptors). Counts calls, successful or not.
struct ApiCalls {
    uint64_t device_synchronize = 0, stream_synchronize = 0, event_synchronize = 0;
    uint64_t lt_desc_create = 0, lt_desc_destroy = 0, lt_layout_create = 0, lt_layout_destroy = 0;
    uint64_t lt_preference_create = 0, lt_preference_destroy = 0, lt_heuristic = 0, lt_matmul = 0;
};
ApiCalls api_calls();
/// Increments one field of the counts (thread-safe); the emulated APIs call it.
void count_call(uint64_t ApiCalls::*field);

// ---- thread and block order ----

enum class ThreadOrder { forward, reverse, random };
enum class BlockOrder { sequential, random };

/// The order in which the emulator runs the threads of a block between two synchronization points,
/// and the blocks of a grid. A kernel whose result depends on either has a race (a missing
/// __syncthreads, or blocks that communicate). Random orders are reproducible from their seed.
struct Order {
    ThreadOrder thread = ThreadOrder::forward;
    uint64_t thread_seed = 0;
    BlockOrder block = BlockOrder::sequential;
    uint64_t block_seed = 0;
};

/// Parses "forward", "reverse", "random" or "random:<seed>" (thread) and "sequential", "random" or
/// "random:<seed>" (block); nullptr or "" keeps the default. Errors: throws emu::Error naming the
/// variable and the accepted values.
Order parse_order(const char* thread_spec, const char* block_spec);

/// The order used by launches from now on. Initially parse_order($CUDA_EMU_THREAD_ORDER,
/// $CUDA_EMU_BLOCK_ORDER). Takes effect for launches executed after the call (queued launches run
/// with the order current when they execute).
void set_order(const Order& order);
Order order();

/// "thread=reverse block=random:7": the order for test names and messages.
std::string to_string(const Order& order);

// ---- wmma fragment layout ----

/// The seed of the made-up wmma fragment layout (emu/device_wmma.hpp): each seed maps
/// fragment elements to matrix positions by its own permutation. Initially $CUDA_EMU_WMMA_LAYOUT
/// (a decimal integer), else 1. Errors: throws emu::Error for a malformed variable.
void set_wmma_layout(uint64_t seed);
uint64_t wmma_layout();

// ---- shared-memory bank conflicts ----

/// ldmatrix's shared-memory traffic since the last reset, counted by the PTX model: each 8x8
/// matrix is 8 rows of 16 bytes that one wavefront reads when they fall in 8 different 4-bank
/// groups (32 banks of 4 bytes, by offset in dynamic shared memory); rows sharing banks take one
/// wavefront more per extra row in the busiest bank. extra_wavefronts = 0 is conflict-free.
struct LdmatrixBanks {
    uint64_t matrices = 0;
    uint64_t extra_wavefronts = 0;
};
LdmatrixBanks ldmatrix_banks();
void reset_ldmatrix_banks();

// ---- device profile ----

/// The emulated device's opt-in shared memory per block in bytes
/// (cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDeviceProp::sharedMemPerBlockOptin, and the most
/// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) accepts): $CUDA_EMU_SMEM_OPTIN, read at each
/// call, when it is an integer in [49152, 232448] (e.g. 101376, the 99 KiB of sm_86/sm_89/sm_120),
/// else the H100's 232448.
int smem_optin();

/// The emulated device's compute capability as 10 * major + minor (90 for sm_90, 89, 80, 100,
/// 120): $CUDA_EMU_CC, read at each call, when it is an integer in [50, 129], else 90 (the H100
/// profile). cudaGetDeviceProperties' major/minor,
/// cudaDevAttrComputeCapabilityMajor/Minor and the emulated cuBLASLt's FP8 rules follow it; the
/// rest of the profile (SM count, memory, shared memory) stays the H100's.
int compute_capability();

// ---- errors and launches ----

/// The detailed message of the most recent error on this host thread ("" if none): the emulator's
/// explanation behind a bare cudaError_t (which allocation, which thread, which call site).
std::string last_error_message();

/// Records `code` with `message` as this thread's last error (returned by cudaGetLastError) and
/// prints the message to stderr; sticky errors (kernel faults) are also returned by every later
/// runtime call until cudaDeviceReset. Returns `code`.
cudaError_t record_error(cudaError_t code, const std::string& message, bool sticky = false);

/// Queues one kernel launch on `stream` after checking the configuration: block ≤ 1024 threads
/// (x, y ≤ 1024, z ≤ 64), grid x < 2^31, y, z ≤ 65535, no zero dimension, and `smem` ≤ 48 KiB unless
/// raised by cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize). `body` runs the
/// kernel for the current thread (it reads threadIdx & co. from the scheduler). Returns the error
/// (also recorded as the last error); nothing is queued on error. Called by emu::launch.
cudaError_t launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          std::function<void()> body);

/// Launch-time check of kernel argument `index`: a non-null pointer must point into a live device
/// or pinned host allocation. Returns cudaErrorIllegalAddress (recorded as the last error, with a
/// message naming the kernel, the argument and the pointer) or cudaSuccess.
cudaError_t check_kernel_pointer(const void* kernel, int index, const void* p);

/// The kernel's symbol name (demangled) for messages, or its address when it has none.
std::string kernel_name(const void* kernel);

}  // namespace emu
