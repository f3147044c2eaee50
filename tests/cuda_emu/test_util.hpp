// tests/cuda_emu/test_util.hpp — small helpers shared by the emulator's own tests (test_*.cu).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/cuda/launch.cuh"
#include "emu/emu.hpp"

namespace emu_test {

/// A device array of n T's (cudaMalloc'd, so it starts poisoned: 0xFF bytes).
template <class T>
struct DeviceArray {
    T* p = nullptr;
    size_t n = 0;
    explicit DeviceArray(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
    DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) { upload(v); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    ~DeviceArray() {
        if (emu::is_device_memory(p)) cudaFree(p);  // a fault test's cudaDeviceReset already freed it
    }
    void upload(const std::vector<T>& v) { CUDA_CHECK(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
    /// Blocking copy back to the host (synchronizes the legacy stream).
    std::vector<T> download() const {
        std::vector<T> v(n);
        CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }
};

/// Synchronizes the device expecting a kernel fault whose report contains `needle`; then resets
/// the device (the fault is sticky). Returns the report for further checks.
inline std::string expect_fault(const std::string& needle) {
    cudaError_t err = cudaDeviceSynchronize();
    std::string report = emu::last_error_message();
    EXPECT_EQ(err, cudaErrorLaunchFailure) << report;
    EXPECT_NE(report.find(needle), std::string::npos) << "report lacks '" << needle << "':\n" << report;
    cudaDeviceReset();
    return report;
}

/// Sets the thread and block order for the scope of a test, then restores the previous one.
struct ScopedOrder {
    emu::Order saved = emu::order();
    explicit ScopedOrder(const char* thread_spec, const char* block_spec = "") {
        emu::set_order(emu::parse_order(thread_spec, block_spec));
    }
    ~ScopedOrder() { emu::set_order(saved); }
};

/// The thread orders every order-sensitive test runs under.
inline const char* const kThreadOrders[] = {"forward", "reverse", "random:1", "random:2"};

}  // namespace emu_test
