// emu/scheduler.cpp — fibers, barriers, warp rendezvous and deadlock reports (see scheduler.hpp).
//
// Every worker thread owns one Worker: its lanes (one fiber each, bound to a thread slot of the
// block) and the state of the block it runs. The device-side entry points (syncthreads, warp_op)
// run inside a lane's fiber: they record what the lane waits for and switch back to the
// scheduler loop (Worker::run), which decides who may continue.
#include "emu/scheduler.hpp"

#include <algorithm>
#include <bit>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <sstream>
#include <vector>

#include "emu/device.hpp"
#include "emu/device_ptx.hpp"
#include "emu/global_hazards.hpp"
#include "emu/shared_hazards.hpp"

namespace emu::detail {

constinit thread_local ThreadCoords* t_thread = nullptr;
constinit thread_local BlockCoords* t_block = nullptr;

namespace {

namespace ctx = boost::context;
constexpr size_t kStackBytes = 64 * 1024;

// AddressSanitizer must be told about every stack switch (Sanitize builds); no-ops otherwise.
#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
#else
inline void __sanitizer_start_switch_fiber(void**, const void*, size_t) {}
inline void __sanitizer_finish_switch_fiber(void*, const void**, size_t*) {}
#endif

/// A stack: where it lives (for the sanitizer) and its fake-stack slot.
struct StackInfo {
    const void* bottom = nullptr;
    size_t size = 0;
    void* fake = nullptr;
};

/// Guarded fixed-size stacks that record their bounds in a StackInfo.
struct RecordingStack {
    ctx::protected_fixedsize_stack inner{kStackBytes};
    StackInfo* info;
    ctx::stack_context allocate() {
        ctx::stack_context sc = inner.allocate();
        info->bottom = static_cast<char*>(sc.sp) - sc.size;
        info->size = sc.size;
        return sc;
    }
    void deallocate(ctx::stack_context& sc) { inner.deallocate(sc); }
};

enum class State : uint8_t { ready, barrier, warp, done };

/// Thrown inside a lane to unwind its kernel when the block is abandoned after a report.
struct Abandon {};

/// One CUDA thread slot of the block: its coordinates, what it waits for, and its fiber.
struct Lane : ThreadCoords {
    State state = State::ready;
    bool started = false;  ///< its fiber entered the kernel for the current block
    std::source_location site;
    WarpOp op = WarpOp::syncwarp;
    unsigned mask = 0;
    int width = 32, arg = 0;
    uint64_t value = 0, result = 0;
    unsigned fiber = 0;    ///< the pool fiber running it (valid once started)
};

const char* op_name(WarpOp op) {
    switch (op) {
        case WarpOp::shfl_idx: return "__shfl_sync";
        case WarpOp::shfl_up: return "__shfl_up_sync";
        case WarpOp::shfl_down: return "__shfl_down_sync";
        case WarpOp::shfl_xor: return "__shfl_xor_sync";
        case WarpOp::ballot: return "__ballot_sync";
        case WarpOp::any: return "__any_sync";
        case WarpOp::all: return "__all_sync";
        case WarpOp::syncwarp: return "__syncwarp";
        case WarpOp::collective: return "__syncwarp";  // a collective's own (reports read the same)
    }
    return "?";
}
bool is_shuffle(WarpOp op) { return op <= WarpOp::shfl_xor; }

std::string where(const std::source_location& s) {
    const char* f = s.file_name();
    const char* slash = std::strrchr(f, '/');
    return std::string(slash ? slash + 1 : f) + ":" + std::to_string(s.line());
}
bool same_site(const std::source_location& a, const std::source_location& b) {
    return a.line() == b.line() && a.column() == b.column() &&
           (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}
std::string hex(unsigned m) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%08x", m);
    return b;
}

/// The source lane of a shuffle, following PTX shfl.sync: c = ((32 - width) << 8) | 31 (up: no
/// 31), segmask = c[12:8]; a source outside [minLane, maxLane] yields the lane's own value.
unsigned shuffle_source(WarpOp op, unsigned lane, int arg, int width) {
    unsigned segmask = 32u - static_cast<unsigned>(width);
    unsigned b = static_cast<unsigned>(arg) & 31u;
    unsigned min_lane = lane & segmask;
    unsigned max_lane = min_lane | (31u & ~segmask);
    int j = static_cast<int>(lane);
    bool ok = true;
    switch (op) {
        case WarpOp::shfl_up: j = static_cast<int>(lane) - static_cast<int>(b), ok = j >= static_cast<int>(min_lane); break;
        case WarpOp::shfl_down: j = static_cast<int>(lane + b), ok = j <= static_cast<int>(max_lane); break;
        case WarpOp::shfl_xor: j = static_cast<int>(lane ^ b), ok = j <= static_cast<int>(max_lane); break;
        default: j = static_cast<int>(min_lane | (b & ~segmask)); break;
    }
    return ok ? static_cast<unsigned>(j) : lane;
}

/// splitmix64: a tiny seeded generator for the random thread order.
uint64_t mix(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

class Worker {
public:
    std::string run(const LaunchSpec& spec, const BlockRun& run);

    // ---- called from inside a lane ----
    void syncthreads(std::source_location site);
    uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, std::source_location site);
    unsigned active_mask() const;
    /// The block's dynamic shared memory: the buffer rounded up to 16 bytes (cp.async, ldmatrix).
    void* dynamic_smem() {
        return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(smem_.data()) + 15) & ~uintptr_t{15});
    }
    /// [p, p+n) inside the running lane's fiber stack.
    bool on_lane_stack(const void* p, size_t n) const {
        const StackInfo& st = stacks_[lanes_[cur_].fiber];
        const auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(st.bottom);
        return a < lo + st.size && a + n > lo;
    }

private:
    void setup(const LaunchSpec& spec, const BlockRun& run);
    unsigned take_fiber();
    void fiber_main(unsigned f);
    void enter(unsigned i, unsigned f);
    void run_lane(unsigned i);
    void lane_exited();
    void resume(unsigned i);
    void suspend();
    void to_scheduler(unsigned f);
    [[noreturn]] void fail_in_lane(const std::string& msg);
    void fail(const std::string& msg) {
        if (error_.empty()) error_ = msg;
    }
    void check_barrier();
    void arrive_warp(unsigned i);
    void complete_warp(unsigned base, unsigned mask);
    void make_ready(std::vector<unsigned>& lanes);
    void diagnose_deadlock();
    std::string thread_states() const;
    std::string describe_wait(const Lane& l) const;
    std::string who(unsigned i) const;
    void abandon();

    const LaunchSpec* spec_ = nullptr;
    BlockCoords coords_;
    unsigned n_ = 0;                 // threads in the block
    std::vector<Lane> lanes_;        // one per thread of the block (grows to the largest block)
    std::vector<unsigned> order_;    // thread order: order_[r] runs r-th
    std::vector<unsigned> rank_;     // inverse of order_
    std::deque<unsigned> ready_;     // lanes that may run, in the order they will
    std::vector<uint32_t> waiting_;  // per warp: lanes waiting at a warp operation
    unsigned live_ = 0, at_barrier_ = 0;
    unsigned cur_ = 0;               // the lane running now
    bool abandon_ = false;
    bool chain_ended_ = false;       // the fiber that just returned finished its lanes (not waiting)
    std::string error_;
    ctx::fiber sched_;                  // the scheduler's continuation while a fiber runs
    std::vector<ctx::fiber> fibers_;    // the pool (a suspended fiber's continuation)
    std::deque<StackInfo> stacks_;      // per fiber (a deque: stable addresses for RecordingStack)
    StackInfo sched_stack_;             // the worker thread's own stack
    std::vector<unsigned> fiber_lane_;  // the lane a fiber starts with when resumed idle
    std::vector<unsigned> idle_;        // fibers with no lane
    std::vector<unsigned char> smem_;
};

// Never destroyed: worker threads outlive static destructors.
Worker& worker() {
    thread_local Worker* w = new Worker;
    return *w;
}

void Worker::setup(const LaunchSpec& spec, const BlockRun& run) {
    spec_ = &spec;
    coords_ = {run.block_idx, spec.block, spec.grid};
    t_block = &coords_;
    n_ = spec.block.x * spec.block.y * spec.block.z;
    if (lanes_.size() < n_) lanes_.resize(n_);
    const dim3 b = spec.block;
    for (unsigned i = 0; i < n_; ++i) {
        Lane& l = lanes_[i];
        l.thread_idx = {i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
        l.state = State::ready;
        l.started = false;
    }
    order_.resize(n_);
    rank_.resize(n_);
    for (unsigned r = 0; r < n_; ++r) order_[r] = run.order == ThreadOrder::reverse ? n_ - 1 - r : r;
    if (run.order == ThreadOrder::random) {
        uint64_t s = run.seed;
        for (unsigned r = n_; r > 1; --r) std::swap(order_[r - 1], order_[mix(s) % r]);
    }
    for (unsigned r = 0; r < n_; ++r) rank_[order_[r]] = r;
    ready_.assign(order_.begin(), order_.end());
    waiting_.assign((n_ + 31) / 32, 0);
    live_ = n_;
    at_barrier_ = 0;
    // Dynamic shared memory starts as garbage on a GPU: poison it (NaN as fp32/bf16).
    smem_.assign(spec.smem + 16, 0xFF);
    error_.clear();
    abandon_ = false;
    ptx_block_start();  // no cp.async of an earlier (possibly abandoned) block is in flight
    shared_block_start(dynamic_smem(), spec.smem);
    global_block_start(run.launch, run.block_idx.x + uint64_t{spec.grid.x} * (run.block_idx.y + uint64_t{spec.grid.y} * run.block_idx.z));
}

// The scheduler loop. A lane runs on a fiber until it exits or waits; when it exits and the next
// lane in the ready queue has not started, the same fiber runs that one at once (a plain loop of
// calls: a kernel that never synchronizes costs one fiber switch per block). When it waits, the
// fiber stays with it and the loop hands the next unstarted lane a fresh fiber. Either way the
// lanes run in exactly the order of the ready queue.
std::string Worker::run(const LaunchSpec& spec, const BlockRun& run) {
    setup(spec, run);
    while (live_ > 0 && error_.empty()) {
        if (ready_.empty()) {
            diagnose_deadlock();
            break;
        }
        const unsigned i = ready_.front();
        ready_.pop_front();
        resume(i);
        if (chain_ended_) continue;  // its lanes exited; the bookkeeping is done
        switch (lanes_[cur_].state) {  // cur_: the lane that suspended (the chain may have moved on)
            case State::barrier: ++at_barrier_, check_barrier(); break;
            case State::warp: arrive_warp(cur_); break;
            default: break;
        }
    }
    if (!error_.empty()) abandon();
    t_thread = nullptr;
    t_block = nullptr;
    shared_block_end();
    global_block_end();
    return error_;
}

unsigned Worker::take_fiber() {
    if (!idle_.empty()) {
        unsigned f = idle_.back();
        idle_.pop_back();
        return f;
    }
    const auto f = static_cast<unsigned>(fibers_.size());
    fiber_lane_.push_back(0);
    stacks_.emplace_back();
    fibers_.emplace_back(std::allocator_arg, RecordingStack{{kStackBytes}, &stacks_[f]},
                         [this, f](ctx::fiber&& sched) {
                             __sanitizer_finish_switch_fiber(nullptr, &sched_stack_.bottom, &sched_stack_.size);
                             sched_ = std::move(sched);
                             for (;;) {  // serve lanes, block after block, forever
                                 fiber_main(f);
                                 to_scheduler(f);
                             }
                             return std::move(sched_);
                         });
    return f;
}

/// Switches from fiber f back to the scheduler; returns when the scheduler resumes f.
void Worker::to_scheduler(unsigned f) {
    __sanitizer_start_switch_fiber(&stacks_[f].fake, sched_stack_.bottom, sched_stack_.size);
    sched_ = std::move(sched_).resume();
    __sanitizer_finish_switch_fiber(stacks_[f].fake, &sched_stack_.bottom, &sched_stack_.size);
}

void Worker::enter(unsigned i, unsigned f) {
    Lane& l = lanes_[i];
    l.started = true;
    l.fiber = f;
    cur_ = i;
    t_thread = &l;
}

/// Runs fiber f's lane, then the following unstarted lanes of the ready queue, until one waits
/// (then this never returns here: the fiber is suspended inside the wait) or none is left.
void Worker::fiber_main(unsigned f) {
    unsigned i = fiber_lane_[f];
    for (;;) {
        run_lane(i);
        lane_exited();
        if (abandon_ || !error_.empty() || ready_.empty() || lanes_[ready_.front()].started) break;
        i = ready_.front();
        ready_.pop_front();
        enter(i, f);
    }
    idle_.push_back(f);
    chain_ended_ = true;
}

void Worker::run_lane(unsigned i) {
    if (!abandon_) {
        try {
            spec_->body();
            ptx_lane_exit(i);  // cp.async copies left in flight are a fault
        } catch (const Abandon&) {
        } catch (const std::exception& e) {
            fail(who(i) + " threw: " + e.what());
        }
    }
    lanes_[i].state = State::done;
}

void Worker::lane_exited() {
    --live_;
    check_barrier();  // the last thread not at the barrier may have left
}

void Worker::resume(unsigned i) {
    Lane& l = lanes_[i];
    if (!l.started) {
        const unsigned f = take_fiber();
        fiber_lane_[f] = i;
        enter(i, f);
    } else {
        cur_ = i;
        t_thread = &l;
    }
    chain_ended_ = false;
    const StackInfo& stack = stacks_[l.fiber];
    __sanitizer_start_switch_fiber(&sched_stack_.fake, stack.bottom, stack.size);
    fibers_[l.fiber] = std::move(fibers_[l.fiber]).resume();
    __sanitizer_finish_switch_fiber(sched_stack_.fake, nullptr, nullptr);
}

void Worker::suspend() {
    to_scheduler(lanes_[cur_].fiber);
    if (abandon_) throw Abandon{};
}

void Worker::fail_in_lane(const std::string& msg) {
    fail(msg);
    throw Abandon{};
}

void Worker::abandon() {
    abandon_ = true;
    for (unsigned i = 0; i < n_; ++i) {
        Lane& l = lanes_[i];
        if (l.state == State::done) continue;
        if (l.started) resume(i);  // it throws Abandon from its wait and unwinds its kernel
        l.state = State::done;
    }
}

// ---- barriers ----

void Worker::syncthreads(std::source_location site) {
    Lane& l = lanes_[cur_];
    l.state = State::barrier;
    l.site = site;
    suspend();
}

void Worker::check_barrier() {
    if (at_barrier_ == 0 || at_barrier_ != live_) return;
    // Every live thread waits at a barrier: they must wait at the same one.
    const Lane* first = nullptr;
    for (unsigned i = 0; i < n_; ++i) {
        const Lane& l = lanes_[i];
        if (l.state != State::barrier) continue;
        if (!first) first = &l;
        else if (!same_site(first->site, l.site)) {
            fail("divergent __syncthreads(): the threads of the block wait at different barriers, " + where(first->site) +
                 " and " + where(l.site) + "\n" + thread_states());
            return;
        }
    }
    std::vector<unsigned> released;
    for (unsigned r = 0; r < n_; ++r)
        if (lanes_[order_[r]].state == State::barrier) released.push_back(order_[r]);
    at_barrier_ = 0;
    shared_barrier();  // a new interval for the hazard checks between warps
    make_ready(released);
}

void Worker::make_ready(std::vector<unsigned>& lanes) {
    auto by_rank = [this](unsigned a, unsigned b) { return rank_[a] < rank_[b]; };
    if (!std::is_sorted(lanes.begin(), lanes.end(), by_rank)) std::sort(lanes.begin(), lanes.end(), by_rank);
    for (unsigned i : lanes) {
        lanes_[i].state = State::ready;
        ready_.push_back(i);
    }
}

// ---- warp operations ----

uint64_t Worker::warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, std::source_location site) {
    auto call = [&] { return std::string(op_name(op)) + "(mask=" + hex(mask) + ") at " + where(site); };
    unsigned lane = cur_ % 32, base = cur_ - lane;
    if (!((mask >> lane) & 1u))
        fail_in_lane("wrong warp mask: " + who(cur_) + " calls " + call() + ", a mask without its own lane " +
                     std::to_string(lane));
    if (base + 32 > n_ && (mask >> (n_ - base)) != 0)
        fail_in_lane("wrong warp mask: " + who(cur_) + " calls " + call() + ", naming lanes beyond the block's " +
                     std::to_string(n_) + " threads (make blocks a multiple of 32 threads)");
    if (is_shuffle(op) && (width < 1 || width > 32 || (width & (width - 1))))
        fail_in_lane(who(cur_) + " calls " + call() + " with width " + std::to_string(width) +
                     ": not a power of 2 in [1, 32]");
    Lane& l = lanes_[cur_];
    l.state = State::warp;
    l.site = site;
    l.op = op;
    l.mask = mask;
    l.width = width;
    l.arg = arg;
    l.value = value;
    suspend();
    return l.result;
}

void Worker::arrive_warp(unsigned i) {
    unsigned w = i / 32, base = w * 32;
    const Lane& l = lanes_[i];
    waiting_[w] |= 1u << (i % 32);
    if ((waiting_[w] & l.mask) != l.mask) return;
    // Every lane of the mask waits at a warp operation; complete when they all wait at this one.
    for (unsigned m = l.mask; m; m &= m - 1) {
        const Lane& o = lanes_[base + std::countr_zero(m)];
        if (o.op != l.op || o.mask != l.mask || !same_site(o.site, l.site)) return;  // may resolve later
    }
    complete_warp(base, l.mask);
}

void Worker::complete_warp(unsigned base, unsigned mask) {
    uint32_t votes = 0;
    for (unsigned m = mask; m; m &= m - 1) {
        unsigned j = std::countr_zero(m);
        if (lanes_[base + j].value) votes |= 1u << j;
    }
    std::vector<unsigned> released;
    for (unsigned m = mask; m; m &= m - 1) {
        unsigned j = std::countr_zero(m);
        Lane& o = lanes_[base + j];
        switch (o.op) {
            case WarpOp::ballot: o.result = votes; break;
            case WarpOp::any: o.result = votes != 0; break;
            case WarpOp::all: o.result = votes == mask; break;
            case WarpOp::syncwarp:
            case WarpOp::collective: o.result = 0; break;
            default: {
                unsigned src = shuffle_source(o.op, j, o.arg, o.width);
                if (!((mask >> src) & 1u)) {
                    fail("wrong warp mask: " + who(base + j) + " in " + op_name(o.op) + "(mask=" + hex(mask) +
                         ") at " + where(o.site) + " reads lane " + std::to_string(src) +
                         ", which is not in the mask (its value is undefined on a GPU)");
                    return;
                }
                o.result = lanes_[base + src].value;
            }
        }
        released.push_back(base + j);
    }
    waiting_[base / 32] &= ~mask;
    if (lanes_[base + std::countr_zero(mask)].op == WarpOp::syncwarp) shared_warp_sync(base / 32);  // memory ordered
    make_ready(released);
}

unsigned Worker::active_mask() const {
    const unsigned base = cur_ - cur_ % 32, lanes = std::min(32u, n_ - base);
    return lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
}

// ---- reports ----

std::string Worker::who(unsigned i) const {
    const dim3 b = spec_->block;
    std::ostringstream s;
    s << "thread (" << i % b.x << "," << (i / b.x) % b.y << "," << i / (b.x * b.y) << ") [warp " << i / 32 << " lane "
      << i % 32 << "]";
    return s.str();
}

std::string Worker::describe_wait(const Lane& l) const {
    switch (l.state) {
        case State::ready: return l.started ? "runnable" : "not started";
        case State::done: return "exited";
        case State::barrier: return "waiting at __syncthreads() at " + where(l.site);
        case State::warp:
            return std::string("waiting in ") + op_name(l.op) + "(mask=" + hex(l.mask) + ") at " + where(l.site);
    }
    return "?";
}

std::string Worker::thread_states() const {
    std::ostringstream s;
    s << "thread states (linear index = x + y*blockDim.x + z*blockDim.x*blockDim.y):";
    for (unsigned i = 0; i < n_;) {
        std::string d = describe_wait(lanes_[i]);
        unsigned j = i + 1;
        while (j < n_ && describe_wait(lanes_[j]) == d) ++j;
        s << "\n  threads " << i << "-" << j - 1 << ": " << d;
        i = j;
    }
    return s.str();
}

void Worker::diagnose_deadlock() {
    std::string reason;
    for (unsigned i = 0; i < n_ && reason.empty(); ++i) {
        const Lane& l = lanes_[i];
        if (l.state != State::warp) continue;
        unsigned base = i - i % 32;
        for (unsigned m = l.mask; m && reason.empty(); m &= m - 1) {
            unsigned j = std::countr_zero(m);
            const Lane& o = lanes_[base + j];
            std::string head = who(i) + " waits in " + op_name(l.op) + "(mask=" + hex(l.mask) + ") at " +
                               where(l.site) + ", but lane " + std::to_string(j) + " of its mask ";
            if (o.state == State::done) reason = "wrong warp mask: " + head + "has exited";
            else if (o.state == State::barrier)
                reason = "divergent warp operation: " + head + "waits at __syncthreads() at " + where(o.site);
            else if (o.state == State::warp && (o.op != l.op || o.mask != l.mask || !same_site(o.site, l.site)))
                reason = "wrong warp mask or divergent warp operations: " + head + "waits in " + op_name(o.op) +
                         "(mask=" + hex(o.mask) + ") at " + where(o.site);
        }
    }
    if (reason.empty()) reason = "no thread can proceed";
    fail("deadlock: " + reason + "\n" + thread_states());
}

}  // namespace

// ---- device-side entry points: forward to this worker ----

namespace {
/// The worker running a kernel on this thread; device functions called outside a kernel throw.
Worker& kernel_worker(const char* fn) {
    if (!t_block) throw Error(std::string(fn) + " called outside a kernel");
    return worker();
}
}  // namespace

void syncthreads(std::source_location site) { kernel_worker("__syncthreads").syncthreads(site); }

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, std::source_location site) {
    return kernel_worker(op_name(op)).warp_op(op, mask, value, arg, width, site);
}

unsigned active_mask() { return kernel_worker("__activemask").active_mask(); }

void* dynamic_smem() { return kernel_worker("dynamic shared memory").dynamic_smem(); }

bool on_lane_stack(const void* p, size_t n) { return kernel_worker("on_lane_stack").on_lane_stack(p, n); }

std::string run_block(const LaunchSpec& spec, const BlockRun& run) { return worker().run(spec, run); }

}  // namespace emu::detail
