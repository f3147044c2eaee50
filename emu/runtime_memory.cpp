// emu/runtime_memory.cpp — the CUDA runtime's memory API: allocation, copies and memsets.
//
// Copies check both sides against the allocation registry (a device side must lie inside one
// cudaMalloc allocation, a host side must not be device memory) and run in stream order:
//  - host -> device from pageable memory: the source is copied at queue time (as CUDA stages it),
//    from pinned memory it is read when the copy runs (rewriting it before the sync is a race);
//  - device -> host: the destination is poisoned (0xFF: NaN) at queue time and written at the sync;
//  - cudaMemcpy / cudaMemcpy2D are cudaMemcpyAsync on the legacy stream followed by its sync;
//  - cudaFree and cudaFreeHost first run all queued work (CUDA waits for an idle device).
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "emu/emu.hpp"
#include "emu/errors.hpp"
#include "emu/memory.hpp"
#include "emu/streams.hpp"

namespace {

using emu::memory::Kind;

const char* kind_name(cudaMemcpyKind k) {
    switch (k) {
        case cudaMemcpyHostToHost: return "HostToHost";
        case cudaMemcpyHostToDevice: return "HostToDevice";
        case cudaMemcpyDeviceToHost: return "DeviceToHost";
        case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
        case cudaMemcpyDefault: return "Default";
    }
    return "invalid";
}

/// One side of a copy: `extent` bytes from p (rows x pitch for 2D copies).
struct Side {
    const void* p;
    size_t extent;
    const char* name;  // "dst" or "src"
};

/// Checks that `s` is device memory (device == true) or not; returns "" or the reason.
std::string check_side(const Side& s, bool device) {
    if (s.extent == 0) return "";
    const emu::memory::Allocation* a = emu::memory::find(s.p);
    bool is_device = a && a->kind == Kind::device;
    std::ostringstream m;
    if (device) {
        try {
            emu::check_device_range(s.p, s.extent, s.name);
        } catch (const emu::Error& e) {
            return e.what();
        }
        if (!is_device) m << s.name << " " << s.p << " is " << emu::memory::describe(*a) << ", not device memory";
    } else if (is_device) {
        m << s.name << " " << s.p << " is device memory (" << emu::memory::describe(*a) << ") but the copy kind says host";
    } else if (a) {  // pinned host memory: its extent is known, check it
        try {
            emu::check_device_range(s.p, s.extent, s.name);
        } catch (const emu::Error& e) {
            return e.what();
        }
    }
    return m.str();
}

/// Validates a copy and resolves cudaMemcpyDefault from the pointers. Returns the recorded error.
cudaError_t check_copy(const char* fn, Side dst, Side src, cudaMemcpyKind* kind) {
    auto fail = [&](const std::string& why) {
        std::ostringstream m;
        m << fn << "(dst=" << dst.p << ", src=" << src.p << ", " << kind_name(*kind) << "): " << why;
        return emu::record_error(cudaErrorInvalidValue, m.str());
    };
    if (*kind == cudaMemcpyDefault)
        *kind = static_cast<cudaMemcpyKind>((emu::is_device_memory(src.p) ? 2 : 0) +
                                            (emu::is_device_memory(dst.p) ? 1 : 0));
    if (*kind < cudaMemcpyHostToHost || *kind > cudaMemcpyDeviceToDevice)
        return emu::record_error(cudaErrorInvalidMemcpyDirection, std::string(fn) + ": invalid cudaMemcpyKind");
    const bool src_device = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
    const bool dst_device = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
    if (std::string why = check_side(dst, dst_device); !why.empty()) return fail(why);
    if (std::string why = check_side(src, src_device); !why.empty()) return fail(why);
    return cudaSuccess;
}

/// A 2D copy's geometry: `height` rows of `width` bytes, pitches apart.
struct Rows {
    size_t dpitch, spitch, width, height;
    size_t dst_extent() const { return height ? (height - 1) * dpitch + width : 0; }
    size_t src_extent() const { return height ? (height - 1) * spitch + width : 0; }
};

/// Queues a (2D) copy on `stream`; returns the queued item's seq through *seq.
cudaError_t queue_copy(const char* fn, void* dst, const void* src, Rows r, cudaMemcpyKind kind, cudaStream_t stream,
                       uint64_t* seq = nullptr) {
    EMU_RETURN_IF_STICKY();
    if (r.width > r.dpitch || r.width > r.spitch)
        return emu::record_error(cudaErrorInvalidPitchValue, std::string(fn) + ": width exceeds a pitch");
    if (cudaError_t e = check_copy(fn, {dst, r.dst_extent(), "dst"}, {src, r.src_extent(), "src"}, &kind)) return e;
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(stream);
    if (!s) return emu::record_error(cudaErrorInvalidResourceHandle, std::string(fn) + ": invalid stream handle");
    if (r.width == 0 || r.height == 0) return cudaSuccess;
    auto copy_rows = [](void* d, const void* sp, Rows g) {
        for (size_t i = 0; i < g.height; ++i)
            std::memmove(static_cast<char*>(d) + i * g.dpitch, static_cast<const char*>(sp) + i * g.spitch, g.width);
    };
    std::function<void()> run;
    if (kind == cudaMemcpyHostToDevice && !emu::is_device_accessible(src)) {
        // Pageable source: staged now, so the caller may reuse it at once.
        auto staged = std::make_shared<std::vector<char>>(r.src_extent());
        std::memcpy(staged->data(), src, staged->size());
        run = [=] { copy_rows(dst, staged->data(), r); };
    } else {
        if (kind == cudaMemcpyDeviceToHost)
            for (size_t i = 0; i < r.height; ++i) emu::poison_host(static_cast<char*>(dst) + i * r.dpitch, r.width);
        run = [=] { copy_rows(dst, src, r); };
    }
    uint64_t q = emu::streams::push(s, std::move(run), fn);
    if (seq) *seq = q;
    return cudaSuccess;
}

/// cudaMemcpy / cudaMemcpy2D: the copy on the legacy stream, then that stream's sync.
cudaError_t blocking_copy(const char* fn, void* dst, const void* src, Rows r, cudaMemcpyKind kind) {
    std::lock_guard lock(emu::streams::lock());
    uint64_t seq = 0;
    if (cudaError_t e = queue_copy(fn, dst, src, r, kind, nullptr, &seq)) return e;
    if (seq) emu::streams::run_until(emu::streams::resolve(nullptr), seq);
    return emu::errors::sticky();
}

cudaError_t queue_memset(const char* fn, void* p, int value, size_t count, cudaStream_t stream) {
    EMU_RETURN_IF_STICKY();
    try {
        emu::check_device_range(p, count, fn);
    } catch (const emu::Error& e) {
        return emu::record_error(cudaErrorInvalidValue, e.what());
    }
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(stream);
    if (!s) return emu::record_error(cudaErrorInvalidResourceHandle, std::string(fn) + ": invalid stream handle");
    if (count) emu::streams::push(s, [=] { std::memset(p, value, count); }, fn);
    return cudaSuccess;
}

/// Frees after running all queued work, as CUDA's cudaFree waits for the device to be idle.
cudaError_t free_after_sync(void* p, Kind kind) {
    {
        std::lock_guard lock(emu::streams::lock());
        emu::streams::run_all();
    }
    EMU_RETURN_IF_STICKY();
    return emu::memory::release(p, kind);
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
    EMU_RETURN_IF_STICKY();
    return emu::memory::allocate(devPtr, size, Kind::device);
}

cudaError_t cudaFree(void* devPtr) {
    EMU_RETURN_IF_STICKY();
    return free_after_sync(devPtr, Kind::device);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
    EMU_RETURN_IF_STICKY();
    return emu::memory::allocate(ptr, size, Kind::pinned);
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) {
    EMU_RETURN_IF_STICKY();
    return emu::memory::allocate(pHost, size, Kind::pinned);
}

cudaError_t cudaFreeHost(void* ptr) {
    EMU_RETURN_IF_STICKY();
    return free_after_sync(ptr, Kind::pinned);
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int) {
    EMU_RETURN_IF_STICKY();
    return emu::memory::register_host(ptr, size);
}

cudaError_t cudaHostUnregister(void* ptr) {
    EMU_RETURN_IF_STICKY();
    return emu::memory::unregister_host(ptr);
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int) {
    EMU_RETURN_IF_STICKY();
    const emu::memory::Allocation* a = emu::memory::find(pHost);
    if (!a || a->kind == Kind::device)
        return emu::record_error(cudaErrorInvalidValue, "cudaHostGetDevicePointer: not pinned host memory");
    *pDevice = pHost;  // unified addressing: the same address on both sides
    return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
    EMU_RETURN_IF_STICKY();
    {
        std::lock_guard lock(emu::streams::lock());
        if (!emu::streams::resolve(hStream))
            return emu::record_error(cudaErrorInvalidResourceHandle, "cudaMallocAsync: invalid stream handle");
    }
    return emu::memory::allocate(devPtr, size, Kind::device);
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
    EMU_RETURN_IF_STICKY();
    const emu::memory::Allocation* a = emu::memory::find(devPtr);
    if (devPtr && (!a || a->kind != Kind::device || a->base != reinterpret_cast<uintptr_t>(devPtr)))
        return emu::memory::release(devPtr, Kind::device);  // reports the same errors as cudaFree
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(hStream);
    if (!s) return emu::record_error(cudaErrorInvalidResourceHandle, "cudaFreeAsync: invalid stream handle");
    if (devPtr) emu::streams::push(s, [devPtr] { emu::memory::release(devPtr, Kind::device); }, "cudaFreeAsync");
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
    EMU_RETURN_IF_STICKY();
    size_t used = 0;
    emu::memory::device_usage(&used, total);
    *free = *total > used ? *total - used : 0;
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
    EMU_RETURN_IF_STICKY();
    *attributes = cudaPointerAttributes{};
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = 0;
    if (const emu::memory::Allocation* a = emu::memory::find(ptr)) {
        attributes->type = a->kind == Kind::device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
        attributes->devicePointer = const_cast<void*>(ptr);
        if (a->kind != Kind::device) attributes->hostPointer = const_cast<void*>(ptr);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    return blocking_copy("cudaMemcpy", dst, src, {count, count, count, 1}, kind);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
    return queue_copy("cudaMemcpyAsync", dst, src, {count, count, count, 1}, kind, stream);
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
    return blocking_copy("cudaMemcpy2D", dst, src, {dpitch, spitch, width, height}, kind);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
    return queue_copy("cudaMemcpy2DAsync", dst, src, {dpitch, spitch, width, height}, kind, stream);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
    return queue_memset("cudaMemset", devPtr, value, count, nullptr);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
    return queue_memset("cudaMemsetAsync", devPtr, value, count, stream);
}

}  // extern "C"
