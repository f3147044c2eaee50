// model/allocator.cpp — byte accounting by category over a backend's malloc (see allocator.hpp).
#include "model/allocator.hpp"

#include <algorithm>
#include <stdexcept>

namespace llmtrain {

const char* mem_category_name(MemCategory c) {
    switch (c) {
        case MemCategory::params: return "params";
        case MemCategory::grads: return "grads";
        case MemCategory::optimizer: return "optimizer";
        case MemCategory::activations: return "activations";
        case MemCategory::workspace: return "workspace";
        case MemCategory::comm: return "comm";
        case MemCategory::host: return "host";
        default: return "unknown";
    }
}

Allocator::Allocator(Ops& ops) : ops_(ops) {
    if (ops_.internal_memory_listener() == nullptr) ops_.set_internal_memory_listener(this);
}

Allocator::~Allocator() {
    if (ops_.internal_memory_listener() == this) ops_.set_internal_memory_listener(nullptr);
    // Whatever is still live belongs to us; hand it back so the backend does not leak.
    for (auto& [p, info] : live_) {
        if (info.first == MemCategory::host)
            ops_.free_host(p);
        else
            ops_.free(p);
    }
}

void Allocator::add(MemCategory cat, size_t bytes) {
    const int c = static_cast<int>(cat);
    cur_[c] += bytes;
    peak_[c] = std::max(peak_[c], cur_[c]);
    if (cat == MemCategory::host) return;  // the totals are device memory
    cur_total_ += bytes;
    peak_total_ = std::max(peak_total_, cur_total_);
}

void Allocator::remove(MemCategory cat, size_t bytes) {
    cur_[static_cast<int>(cat)] -= bytes;
    if (cat != MemCategory::host) cur_total_ -= bytes;
}

void Allocator::internal_memory_changed(std::ptrdiff_t delta_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (delta_bytes >= 0)
        add(MemCategory::workspace, static_cast<size_t>(delta_bytes));
    else
        remove(MemCategory::workspace, static_cast<size_t>(-delta_bytes));
}

void* Allocator::alloc(MemCategory cat, size_t bytes) {
    void* p = nullptr;
    try {
        p = ops_.malloc(bytes);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("Allocator: cannot allocate ") + std::to_string(bytes) +
                                 " bytes for " + mem_category_name(cat) + ": " + e.what());
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = {cat, bytes};
    add(cat, bytes);
    return p;
}

void* Allocator::alloc_host(size_t bytes) {
    void* p = nullptr;
    try {
        p = ops_.malloc_host(bytes);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("Allocator: cannot allocate ") + std::to_string(bytes) +
                                 " bytes of pinned host memory: " + e.what());
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = {MemCategory::host, bytes};
    add(MemCategory::host, bytes);
    return p;
}

void Allocator::release(void* p) {
    if (p == nullptr) return;
    MemCategory cat;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = live_.find(p);
        if (it == live_.end()) throw std::logic_error("Allocator::release: pointer was not allocated here");
        cat = it->second.first;
        remove(cat, it->second.second);
        live_.erase(it);
    }
    if (cat == MemCategory::host)
        ops_.free_host(p);
    else
        ops_.free(p);
}

size_t Allocator::current(MemCategory cat) const {
    std::lock_guard<std::mutex> lock(mu_);
    return cur_[static_cast<int>(cat)];
}
size_t Allocator::peak(MemCategory cat) const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_[static_cast<int>(cat)];
}
size_t Allocator::current_total() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cur_total_;
}
size_t Allocator::peak_total() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_total_;
}

}  // namespace llmtrain
