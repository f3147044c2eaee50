// emu/order.cpp — the thread and block order of launches: parsing, environment, setting.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "emu/emu.hpp"

namespace emu {
namespace {

std::mutex g_mu;
std::optional<Order> g_order;  // unset until first use: then from the environment

/// Splits "random:<seed>" into its seed; "random" alone gives seed 0. Returns false on bad syntax.
bool parse_random(const char* spec, uint64_t* seed) {
    if (std::strcmp(spec, "random") == 0) return *seed = 0, true;
    if (std::strncmp(spec, "random:", 7) != 0 || spec[7] == '\0') return false;
    char* end = nullptr;
    *seed = std::strtoull(spec + 7, &end, 10);
    return *end == '\0';
}

}  // namespace

Order parse_order(const char* thread_spec, const char* block_spec) {
    Order o;
    if (thread_spec && *thread_spec) {
        if (std::strcmp(thread_spec, "forward") == 0) o.thread = ThreadOrder::forward;
        else if (std::strcmp(thread_spec, "reverse") == 0) o.thread = ThreadOrder::reverse;
        else if (parse_random(thread_spec, &o.thread_seed)) o.thread = ThreadOrder::random;
        else
            throw Error(std::string("CUDA_EMU_THREAD_ORDER='") + thread_spec +
                        "': expected forward, reverse, random or random:<seed>");
    }
    if (block_spec && *block_spec) {
        if (std::strcmp(block_spec, "sequential") == 0) o.block = BlockOrder::sequential;
        else if (parse_random(block_spec, &o.block_seed)) o.block = BlockOrder::random;
        else
            throw Error(std::string("CUDA_EMU_BLOCK_ORDER='") + block_spec +
                        "': expected sequential, random or random:<seed>");
    }
    return o;
}

void set_order(const Order& order) {
    std::lock_guard lock(g_mu);
    g_order = order;
}

Order order() {
    std::lock_guard lock(g_mu);
    if (!g_order) g_order = parse_order(std::getenv("CUDA_EMU_THREAD_ORDER"), std::getenv("CUDA_EMU_BLOCK_ORDER"));
    return *g_order;
}

std::string to_string(const Order& o) {
    std::string s = "thread=";
    s += o.thread == ThreadOrder::forward ? "forward"
         : o.thread == ThreadOrder::reverse ? "reverse"
                                            : "random:" + std::to_string(o.thread_seed);
    s += " block=";
    s += o.block == BlockOrder::sequential ? "sequential" : "random:" + std::to_string(o.block_seed);
    return s;
}

}  // namespace emu
