// app/config/world.hpp — the checks of a config against the number of ranks it runs on, the part of
// config/'s checks that needs the world size (known at start-up, or --dry-run's --world-size):
// parallel.pp / tp / cp dividing it, parallel.dp resolved, the ZeRO group and parallel.ep against
// dp, and the batch keys for that dp (resolve_batch). Each key is checked here once; what comes
// after reads the RunShape built from the result (app/state/run_shape.hpp).
#pragma once
#include <string>
#include <vector>

#include "app/config/config.hpp"

namespace llmtrain {

/// Resolves cfg for `world` ranks (`what` names them in messages, e.g. "the number of ranks (8)" or
/// "--world-size 64"): parallel.pp, pp x tp and pp x tp x cp must divide world; parallel.dp = 0
/// becomes world / (pp x tp x cp), and with `dp_must_match` a set one must equal that;
/// parallel.zero_group_size must be 0 at zero_stage 0 and else 0 or a divisor of dp x cp;
/// parallel.ep must divide dp, and a zero_group_size > 1 be a multiple of it; then the batch keys
/// (resolve_batch). Returns the warnings for rank 0 to print (a ZeRO stage over a group of one rank,
/// which shards nothing), without "llmtrain: warning: ".
/// Errors: ConfigError naming the key (exit 2).
std::vector<std::string> resolve_world(Config& cfg, int world, const std::string& what, bool dp_must_match);

}  // namespace llmtrain
