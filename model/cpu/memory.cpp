// model/cpu/memory.cpp — CPU backend memory, dummy streams/events, and dtype casts.
//
// "Device" memory is 256-byte aligned host memory; copies are memcpy and run at once, so streams
// need no state beyond a unique handle, and events only the time they were recorded.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>

#include "model/cpu/blas_setup.hpp"
#include "model/bf16.hpp"
#include "model/cpu/cpu_ops.hpp"

namespace llmtrain {

namespace {

constexpr size_t kAlign = 256;


}  // namespace

CpuOps::CpuOps() { cpu::setup_blas(); }

void* CpuOps::malloc(size_t bytes) {
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    if (p == nullptr) throw std::runtime_error("CpuOps::malloc: out of host memory for " +
                                               std::to_string(bytes) + " bytes");
    return p;
}
void CpuOps::free(void* p) { std::free(p); }
void* CpuOps::malloc_host(size_t bytes) { return malloc(bytes); }
void CpuOps::free_host(void* p) { std::free(p); }
void CpuOps::memcpy_h2d(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuOps::memcpy_d2h(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuOps::memcpy_d2d(void* dst, const void* src, size_t bytes) {
    if (dst != src) std::memmove(dst, src, bytes);
}
void CpuOps::memset(void* p, int value, size_t bytes) { std::memset(p, value, bytes); }

void CpuOps::mem_info(size_t* free_bytes, size_t* total_bytes) {
    // /proc/meminfo lines: "MemTotal:  24684096 kB", "MemAvailable: ... kB".
    size_t total = 0, avail = 0;
    std::ifstream f("/proc/meminfo");
    std::string key;
    size_t kb;
    std::string unit;
    while (f >> key >> kb >> unit) {
        if (key == "MemTotal:") total = kb * 1024;
        if (key == "MemAvailable:") avail = kb * 1024;
    }
    *free_bytes = avail;
    *total_bytes = total;
}

// Streams and events: a unique non-null handle each, nothing to wait for (ops run at once). An event
// holds the host time it was recorded at, which is when the ops before it finished.
namespace {
struct CpuEvent {
    std::chrono::steady_clock::time_point at{};
};
}  // namespace
Stream CpuOps::create_stream() { return new char; }
void CpuOps::destroy_stream(Stream s) { delete static_cast<char*>(s); }
Event CpuOps::create_event() { return new CpuEvent; }
void CpuOps::destroy_event(Event e) { delete static_cast<CpuEvent*>(e); }
void CpuOps::record_event(Event e) { static_cast<CpuEvent*>(e)->at = std::chrono::steady_clock::now(); }
double CpuOps::elapsed_seconds(Event start, Event end) {
    return std::chrono::duration<double>(static_cast<CpuEvent*>(end)->at - static_cast<CpuEvent*>(start)->at).count();
}

void CpuOps::cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n) {
    if (dst_t == src_t) {
        memcpy_d2d(dst, src, n * dtype_size(dst_t));
        return;
    }
    const long long nn = static_cast<long long>(n);
    if (dst_t == DType::bf16) {  // f32 -> bf16
        const float* s = static_cast<const float*>(src);
        uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static)
        for (long long i = 0; i < nn; ++i) d[i] = f32_to_bf16(s[i]);
    } else {  // bf16 -> f32
        const uint16_t* s = static_cast<const uint16_t*>(src);
        float* d = static_cast<float*>(dst);
#pragma omp parallel for schedule(static)
        for (long long i = 0; i < nn; ++i) d[i] = bf16_to_f32(s[i]);
    }
}

std::unique_ptr<Ops> make_cpu_backend() { return std::make_unique<CpuOps>(); }

}  // namespace llmtrain
