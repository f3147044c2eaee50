// app/config/world.cpp — a config against its world size (see world.hpp).
#include "app/config/world.hpp"

namespace llmtrain {

namespace {

/// parallel.pp, parallel.tp and parallel.cp against a world of `world` ranks: pp must divide it,
/// pp x tp too, and pp x tp x cp.
void check_world(const Config& cfg, int world, const std::string& what) {
    const int pp = cfg.parallel.pp, tp = cfg.parallel.tp, cp = cfg.parallel.cp;
    if (world % pp != 0)
        throw ConfigError("parallel.pp: expected a divisor of " + what + ", got " + std::to_string(pp));
    if (world % (pp * tp) != 0)
        throw ConfigError("parallel.tp: expected parallel.pp x parallel.tp (" + std::to_string(pp) + " x " +
                          std::to_string(tp) + ") to divide " + what + ", got tp " + std::to_string(tp));
    if (world % (pp * tp * cp) != 0)
        throw ConfigError("parallel.cp: expected parallel.pp x parallel.tp x parallel.cp (" + std::to_string(pp) + " x " +
                          std::to_string(tp) + " x " + std::to_string(cp) + ") to divide " + what + ", got cp " +
                          std::to_string(cp));
}

/// parallel.zero_stage / zero_group_size against dp: a group size must divide dp x cp, the ranks a
/// gradient is averaged over; parallel.ep must divide dp, and a group size > 1 be a multiple of ep.
/// Returns the warnings.
std::vector<std::string> check_zero_config(const Config& cfg) {
    const auto& p = cfg.parallel;
    const int dp = p.dp * p.cp;
    if (p.zero_stage == 0 && p.zero_group_size != 0)
        throw ConfigError("parallel.zero_group_size: expected 0 with parallel.zero_stage = 0 (plain data parallelism "
                          "shards nothing), got " + std::to_string(p.zero_group_size));
    if (p.zero_group_size != 0 && dp % p.zero_group_size != 0)
        throw ConfigError(std::string("parallel.zero_group_size: expected 0 or a divisor of ") +
                          (p.cp > 1 ? "dp x cp = " : "dp = ") + std::to_string(dp) + ", got " +
                          std::to_string(p.zero_group_size));
    if (p.ep > 1 && p.dp % p.ep != 0)  // expert parallelism is carved out of the data-parallel ranks
        throw ConfigError("parallel.ep: expected a divisor of the data-parallel ranks dp = " + std::to_string(p.dp) +
                          ", got " + std::to_string(p.ep));
    if (p.ep > 1 && p.zero_group_size > 1 && p.zero_group_size % p.ep != 0)  // parallel/ep_grads expert_dp_of
        throw ConfigError("parallel.zero_group_size: with parallel.ep = " + std::to_string(p.ep) +
                          " expected 0 or a multiple of parallel.ep (the ZeRO group of the ranks that hold the same "
                          "experts is zero_group_size / ep of them), got " + std::to_string(p.zero_group_size));
    const int group = p.zero_group_size == 0 ? dp : p.zero_group_size;
    if (p.zero_stage > 0 && group == 1)
        return {"parallel.zero_stage = " + std::to_string(p.zero_stage) +
                " over a ZeRO group of one rank shards nothing"};
    return {};
}

}  // namespace

std::vector<std::string> resolve_world(Config& cfg, int world, const std::string& what, bool dp_must_match) {
    check_world(cfg, world, what);
    auto& p = cfg.parallel;
    const int dp = world / (p.pp * p.tp * p.cp);  // world = pp x dp x cp x tp
    if (p.dp == 0) p.dp = dp;
    if (dp_must_match && p.dp != dp)
        throw ConfigError("parallel.dp: expected the number of ranks / (parallel.pp x parallel.tp x parallel.cp) (" +
                          std::to_string(world) + " / (" + std::to_string(p.pp) + " x " + std::to_string(p.tp) +
                          " x " + std::to_string(p.cp) + ") = " + std::to_string(dp) + "), got " +
                          std::to_string(p.dp));
    std::vector<std::string> warnings = check_zero_config(cfg);
    resolve_batch(cfg, p.dp);
    return warnings;
}

}  // namespace llmtrain
