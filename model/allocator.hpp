// model/allocator.hpp — device memory with byte accounting by category.
//
// Every device allocation of the model, optimizer, ZeRO engine and pipeline goes through one
// Allocator, which records current and peak bytes per category. The start-up summary, the metrics
// (llmtrain_memory_bytes) and the planner's tests read these numbers instead of guessing. The
// backend's own workspaces (cuBLASLt, reduction scratch: Ops::InternalMemoryListener) count as
// "workspace" too, so the totals are all the device memory the program asked for.
#pragma once
#include <array>
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

#include "model/ops.hpp"

namespace llmtrain {

/// What an allocation is for (docs/design.md "Forward and backward over a layer range": bytes by category).
/// Every category is device memory except `host`: the pinned host memory of the offloaded optimizer.
enum class MemCategory : int { params, grads, optimizer, activations, workspace, comm, host, count };

/// Lower-case name of a category ("params", "grads", "optimizer", "activations", "workspace",
/// "comm", "host"). comm: ZeRO gather and reduce working buffers; host: pinned host memory.
const char* mem_category_name(MemCategory c);

/// Allocates through a backend's Ops::malloc and accounts the bytes. The first Allocator made over
/// a backend also listens to the backend's own allocations (workspace category).
class Allocator final : public Ops::InternalMemoryListener {
public:
    explicit Allocator(Ops& ops);
    ~Allocator();
    Allocator(const Allocator&) = delete;
    Allocator& operator=(const Allocator&) = delete;

    /// Allocates `bytes` of device memory for category `cat`. Errors: std::runtime_error naming the
    /// category and size when the backend cannot allocate.
    void* alloc(MemCategory cat, size_t bytes);
    /// Allocates `bytes` of page-locked host memory (Ops::malloc_host) in the host category.
    /// Errors: std::runtime_error naming the size when the backend cannot allocate (pinned memory is
    /// limited by RLIMIT_MEMLOCK and the host's RAM).
    void* alloc_host(size_t bytes);
    /// Frees a pointer returned by alloc() or alloc_host(); null is ignored. Errors: std::logic_error
    /// for an unknown pointer.
    void release(void* p);

    size_t current(MemCategory cat) const;  ///< bytes now held
    size_t peak(MemCategory cat) const;     ///< most bytes held at once
    size_t current_total() const;           ///< device bytes now held (every category but host)
    size_t peak_total() const;              ///< peak of the device total
    Ops& ops() { return ops_; }

    /// The backend allocated (+) or freed (-) bytes of its own: accounted as workspace.
    void internal_memory_changed(std::ptrdiff_t delta_bytes) override;

private:
    void add(MemCategory cat, size_t bytes);     ///< caller holds mu_
    void remove(MemCategory cat, size_t bytes);  ///< caller holds mu_

    Ops& ops_;
    mutable std::mutex mu_;
    std::unordered_map<void*, std::pair<MemCategory, size_t>> live_;
    std::array<size_t, static_cast<int>(MemCategory::count)> cur_{}, peak_{};
    size_t cur_total_ = 0, peak_total_ = 0;
};

}  // namespace llmtrain
