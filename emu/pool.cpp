// emu/pool.cpp — a fixed pool of helper threads for parallel_for (see pool.hpp).
#include "emu/pool.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "emu/emu.hpp"

namespace emu::detail {
namespace {

/// $CUDA_EMU_WORKERS, default 2.
int worker_count() {
    const char* env = std::getenv("CUDA_EMU_WORKERS");
    if (!env || !*env) return 2;
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (*end != '\0' || n < 1 || n > 64)
        throw Error(std::string("CUDA_EMU_WORKERS='") + env + "': expected an integer in [1, 64]");
    return static_cast<int>(n);
}

class Pool {
public:
    explicit Pool(int helpers) {
        for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { helper(); });
    }
    void run(uint64_t count, const std::function<void(uint64_t)>& job) {
        {
            std::lock_guard lock(mu_);
            job_ = &job;
            count_ = count;
            next_ = 0;
            busy_ = static_cast<int>(threads_.size());
            ++generation_;
        }
        work_cv_.notify_all();
        drain();
        std::unique_lock lock(mu_);
        done_cv_.wait(lock, [this] { return busy_ == 0; });
    }

private:
    void drain() {
        for (uint64_t i; (i = next_.fetch_add(1)) < count_;) (*job_)(i);
    }
    void helper() {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock lock(mu_);
                work_cv_.wait(lock, [&] { return generation_ != seen; });
                seen = generation_;
            }
            drain();
            std::lock_guard lock(mu_);
            if (--busy_ == 0) done_cv_.notify_all();
        }
    }

    std::mutex mu_;
    std::condition_variable work_cv_, done_cv_;
    const std::function<void(uint64_t)>* job_ = nullptr;
    uint64_t count_ = 0;
    std::atomic<uint64_t> next_{0};
    uint64_t generation_ = 0;
    int busy_ = 0;
    std::vector<std::thread> threads_;
};

}  // namespace

void parallel_for(uint64_t count, const std::function<void(uint64_t)>& job) {
    static const int workers = worker_count();
    if (workers == 1 || count == 1) {
        for (uint64_t i = 0; i < count; ++i) job(i);
        return;
    }
    static Pool* pool = new Pool(workers - 1);  // never destroyed: its threads outlive static destructors
    pool->run(count, job);
}

}  // namespace emu::detail
