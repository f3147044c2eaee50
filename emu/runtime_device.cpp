// emu/runtime_device.cpp — the CUDA runtime's device API with an H100-like profile.
//
// The emulated device reports an H100 SXM (sm_90, 132 SMs, 80 GiB, 227 KiB opt-in shared memory
// per block) so that code sizing launches from device properties picks production-like values.
// $CUDA_EMU_DEVICE_COUNT devices (default 1) may be selected; they all share one emulated memory
// and one set of streams. $CUDA_EMU_SMEM_OPTIN lowers the opt-in shared memory per block (e.g. to
// an sm_86's 99 KiB) for tests of code that sizes kernels by it (emu::smem_optin); $CUDA_EMU_CC
// changes the reported compute capability (e.g. 80 or 89, for code and cuBLASLt rules that depend
// on it: emu::compute_capability). cudaDeviceReset
// frees everything and clears a sticky error.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "emu/emu.hpp"
#include "emu/errors.hpp"
#include "emu/memory.hpp"
#include "emu/streams.hpp"

namespace {

thread_local int t_device = 0;  // cudaSetDevice is per host thread

int device_count() {
    const char* env = std::getenv("CUDA_EMU_DEVICE_COUNT");
    int n = env ? std::atoi(env) : 1;
    return n >= 1 && n <= 64 ? n : 1;
}

cudaError_t check_device(const char* fn, int device) {
    if (device >= 0 && device < device_count()) return cudaSuccess;
    return emu::record_error(cudaErrorInvalidDevice, std::string(fn) + "(" + std::to_string(device) +
                                                         "): no such device (CUDA_EMU_DEVICE_COUNT=" +
                                                         std::to_string(device_count()) + ")");
}

cudaDeviceProp h100_profile() {
    cudaDeviceProp p{};
    std::strncpy(p.name, "cuda_emu (NVIDIA H100 80GB HBM3 profile)", sizeof p.name - 1);
    size_t used = 0;
    emu::memory::device_usage(&used, &p.totalGlobalMem);
    p.sharedMemPerBlock = 48 * 1024;
    p.sharedMemPerBlockOptin = size_t(emu::smem_optin());
    p.sharedMemPerMultiprocessor = 233472;
    p.reservedSharedMemPerBlock = 1024;
    p.regsPerBlock = p.regsPerMultiprocessor = 65536;
    p.warpSize = 32;
    p.memPitch = 2147483647;
    p.maxThreadsPerBlock = 1024;
    p.maxThreadsDim[0] = p.maxThreadsDim[1] = 1024, p.maxThreadsDim[2] = 64;
    p.maxGridSize[0] = 2147483647, p.maxGridSize[1] = p.maxGridSize[2] = 65535;
    p.totalConstMem = 65536;
    p.major = emu::compute_capability() / 10, p.minor = emu::compute_capability() % 10;
    p.textureAlignment = 512, p.texturePitchAlignment = 32;
    p.multiProcessorCount = 132;
    p.canMapHostMemory = 1;
    p.concurrentKernels = 1;
    p.asyncEngineCount = 3;
    p.unifiedAddressing = 1;
    p.memoryBusWidth = 5120;
    p.l2CacheSize = 50 * 1024 * 1024;
    p.persistingL2CacheMaxSize = 32 * 1024 * 1024;
    p.maxThreadsPerMultiProcessor = 2048;
    p.maxBlocksPerMultiProcessor = 32;
    p.streamPrioritiesSupported = 1;
    p.globalL1CacheSupported = p.localL1CacheSupported = 1;
    p.managedMemory = 1;
    p.computePreemptionSupported = 1;
    p.cooperativeLaunch = 1;
    p.hostRegisterSupported = 1;
    p.memoryPoolsSupported = 1;
    p.clusterLaunch = 1;
    return p;
}

}  // namespace

namespace emu {

int smem_optin() {
    constexpr long kH100 = 232448;
    const char* env = std::getenv("CUDA_EMU_SMEM_OPTIN");
    if (env == nullptr || *env == '\0') return int(kH100);
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    return *end == '\0' && v >= 49152 && v <= kH100 ? int(v) : int(kH100);
}

int compute_capability() {
    const char* env = std::getenv("CUDA_EMU_CC");
    if (env == nullptr || *env == '\0') return 90;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    return *end == '\0' && v >= 50 && v <= 129 ? int(v) : 90;
}

}  // namespace emu

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
    *count = device_count();
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    EMU_RETURN_IF_STICKY();
    if (cudaError_t e = check_device("cudaSetDevice", device)) return e;
    t_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    *device = t_device;
    return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int) { return cudaSuccess; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (cudaError_t e = check_device("cudaGetDeviceProperties", device)) return e;
    *prop = h100_profile();
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (cudaError_t e = check_device("cudaDeviceGetAttribute", device)) return e;
    const cudaDeviceProp p = h100_profile();
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
        case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
        case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
        case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
        case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
        case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(p.sharedMemPerMultiprocessor); break;
        case cudaDevAttrWarpSize: *value = p.warpSize; break;
        case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
        case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
        case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
        case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
        case cudaDevAttrUnifiedAddressing: *value = 1; break;
        case cudaDevAttrConcurrentKernels: *value = 1; break;
        default:
            return emu::record_error(cudaErrorInvalidValue,
                                     "cudaDeviceGetAttribute: attribute " + std::to_string(attr) + " is not emulated");
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = -5;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
    *driverVersion = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDeviceReset(void) {
    std::lock_guard lock(emu::streams::lock());
    emu::streams::reset();
    emu::streams::reset_events();
    emu::memory::release_all();
    emu::errors::reset();
    return cudaSuccess;
}

}  // extern "C"
