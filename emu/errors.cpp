// emu/errors.cpp — last/sticky error state and the runtime's error-reporting functions:
// cudaGetLastError, cudaPeekAtLastError, cudaGetErrorName, cudaGetErrorString (see errors.hpp).
#include "emu/errors.hpp"

#include <cstdio>
#include <mutex>
#include <string>

#include "emu/emu.hpp"

namespace {

thread_local cudaError_t t_last = cudaSuccess;  // this host thread's last error
thread_local std::string t_message;            // and its explanation

std::mutex g_mu;
cudaError_t g_sticky = cudaSuccess;  // guarded by g_mu

struct ErrorText {
    cudaError_t code;
    const char* name;
    const char* text;
};
// The codes the emulator produces or a caller is likely to test, with CUDA's wording.
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidHostPointer, "cudaErrorInvalidHostPointer", "invalid host pointer"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorNotYetImplemented, "cudaErrorNotYetImplemented", "feature not yet implemented"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorUnsupportedLimit, "cudaErrorUnsupportedLimit", "limit is not supported on this architecture"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorLaunchTimeout, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorAssert, "cudaErrorAssert", "device-side assert triggered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* lookup(cudaError_t code) {
    for (const ErrorText& e : kErrors)
        if (e.code == code) return &e;
    return nullptr;
}

}  // namespace

namespace emu {

cudaError_t record_error(cudaError_t code, const std::string& message, bool sticky) {
    t_last = code;
    t_message = message;
    if (sticky) {
        std::lock_guard lock(g_mu);
        if (g_sticky == cudaSuccess) g_sticky = code;
    }
    std::fprintf(stderr, "cuda_emu: %s: %s\n", cudaGetErrorName(code), message.c_str());
    return code;
}

std::string last_error_message() { return t_message; }

namespace errors {

cudaError_t sticky() {
    std::lock_guard lock(g_mu);
    return g_sticky;
}

void reset() {
    {
        std::lock_guard lock(g_mu);
        g_sticky = cudaSuccess;
    }
    t_last = cudaSuccess;
    t_message.clear();
}

}  // namespace errors
}  // namespace emu

extern "C" {

cudaError_t cudaGetLastError(void) {
    if (cudaError_t s = emu::errors::sticky()) return s;
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) {
    if (cudaError_t s = emu::errors::sticky()) return s;
    return t_last;
}

const char* cudaGetErrorName(cudaError_t error) {
    const ErrorText* e = lookup(error);
    return e ? e->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
    const ErrorText* e = lookup(error);
    return e ? e->text : "unrecognized error code";
}

}  // extern "C"
