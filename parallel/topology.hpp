// parallel/topology.hpp — a rank's coordinates and groups (docs/design.md "Ranks and groups").
//
// world = pp × dp, dp = replicas × zero_group_size. Rank order, fastest first: index in the ZeRO
// group (z), replica (r), pipeline stage (s):  world_rank = z + zero_group_size·(r + replicas·s).
// World 4, pp 1, zero_group_size 2: ZeRO groups [0,1] and [2,3], replica groups (0,2) and (1,3).
// The data-parallel index (what the loader shards by) is z + zero_group_size·r, the same order.
// Nothing else in llmtrain does rank arithmetic: it asks a Topology.
#pragma once
#include <string>
#include <vector>

namespace llmtrain {

class Topology {
public:
    /// world = pp · dp; zero_group_size in [1, dp] dividing dp (0 means dp). Errors:
    /// std::invalid_argument naming parallel.zero_group_size or parallel.pp and what was expected.
    Topology(int world_size, int world_rank, int pp, int zero_group_size);

    int world_size() const { return world_; }
    int world_rank() const { return rank_; }
    int pp() const { return pp_; }
    int dp() const { return dp_; }
    int zero_group_size() const { return zg_; }
    int replicas() const { return dp_ / zg_; }

    int stage() const { return rank_ / dp_; }             ///< pipeline stage s
    int dp_index() const { return rank_ % dp_; }          ///< index among this stage's dp ranks
    int zero_index() const { return rank_ % zg_; }        ///< index in the ZeRO group
    int replica() const { return dp_index() / zg_; }     ///< which ZeRO group (replica) of the stage

    /// World ranks of this rank's ZeRO group (same stage and replica), in ZeRO-index order.
    std::vector<int> zero_group() const;
    /// World ranks holding the same shard in the other replicas (same stage and ZeRO index), by replica.
    std::vector<int> replica_group() const;
    /// All dp ranks of this stage, in dp-index order.
    std::vector<int> dp_group() const;
    /// This rank's pipeline: the ranks of the same replica and ZeRO index at every stage, by stage.
    std::vector<int> stage_group() const;
    /// World rank of coordinates (stage, replica, ZeRO index).
    int rank_of(int stage, int replica, int zero_index) const;

    /// "world 4 = pp 1 × dp 4 (2 replicas × zero_group_size 2); ZeRO groups [0,1] [2,3]; replica groups (0,2) (1,3)".
    std::string describe() const;

private:
    int world_, rank_, pp_, dp_, zg_;
};

}  // namespace llmtrain
