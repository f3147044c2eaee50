// tests/parallel/test_topology.cpp — Topology's rank order and groups against the closed form
// world_rank = t + tp·(z + zero_group_size·(r + replicas·s)) (docs/design.md "Ranks and groups"):
// the documented tp = 1 example, tp grids enumerated rank by rank, describe(), and the errors.
// Pure functions: one process, no MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "parallel/topology.hpp"

namespace llmtrain {
namespace {

using V = std::vector<int>;

TEST(Topology, DocumentedExampleWithoutTp) {
    const Topology t(4, 1, 1, 2);
    EXPECT_EQ(t.tp(), 1);
    EXPECT_EQ(t.tp_index(), 0);
    EXPECT_EQ(t.tp_group(), V{1});
    EXPECT_EQ(t.zero_group(), (V{0, 1}));
    EXPECT_EQ(t.replica_group(), (V{1, 3}));
    EXPECT_EQ(t.dp_group(), (V{0, 1, 2, 3}));
    EXPECT_EQ(t.describe(),
              "world 4 = pp 1 x dp 4 (2 replicas x zero_group_size 2); ZeRO groups [0,1] [2,3]; replica groups (0,2) (1,3)");
}

TEST(Topology, TpIsFastestAndGroupsShareTheTpIndex) {
    struct Grid {
        int world, pp, zg, tp;
    };
    for (const Grid g : {Grid{8, 1, 0, 4}, Grid{8, 2, 1, 2}, Grid{16, 2, 2, 2}, Grid{24, 3, 1, 2}, Grid{4, 1, 0, 4}}) {
        SCOPED_TRACE("world " + std::to_string(g.world) + " pp " + std::to_string(g.pp) + " zg " +
                     std::to_string(g.zg) + " tp " + std::to_string(g.tp));
        std::set<V> tp_groups;
        for (int rank = 0; rank < g.world; ++rank) {
            const Topology t(g.world, rank, g.pp, g.zg, g.tp);
            const int dp = g.world / (g.pp * g.tp), zg = g.zg == 0 ? dp : g.zg;
            ASSERT_EQ(t.dp(), dp);
            // The closed form, coordinate by coordinate.
            const int tt = rank % g.tp, z = (rank / g.tp) % zg, r = (rank / (g.tp * zg)) % (dp / zg),
                      s = rank / (g.tp * dp);
            EXPECT_EQ(t.tp_index(), tt);
            EXPECT_EQ(t.zero_index(), z);
            EXPECT_EQ(t.replica(), r);
            EXPECT_EQ(t.stage(), s);
            EXPECT_EQ(t.dp_index(), z + zg * r);
            EXPECT_EQ(t.rank_of(s, r, z, tt), rank);
            // The TP group: tp consecutive ranks from rank - t.
            V want;
            for (int k = 0; k < g.tp; ++k) want.push_back(rank - tt + k);
            EXPECT_EQ(t.tp_group(), want);
            tp_groups.insert(t.tp_group());
            // Every other group holds this rank and ranks of its TP index only.
            for (const V& grp : {t.zero_group(), t.replica_group(), t.dp_group(), t.stage_group()}) {
                EXPECT_NE(std::find(grp.begin(), grp.end(), rank), grp.end());
                for (int q : grp) EXPECT_EQ(q % g.tp, tt) << "rank " << q;
            }
            EXPECT_EQ(int(t.zero_group().size()), zg);
            EXPECT_EQ(int(t.dp_group().size()), dp);
            EXPECT_EQ(int(t.stage_group().size()), g.pp);
            // dp_group is in dp-index order and covers this stage's ranks of this TP index.
            for (int d = 0; d < dp; ++d) EXPECT_EQ(t.dp_group()[size_t(d)], tt + g.tp * (d + dp * s));
        }
        EXPECT_EQ(int(tp_groups.size()), g.world / g.tp);  // the TP groups partition the world
    }
}

TEST(Topology, DescribeShowsTp) {
    EXPECT_EQ(Topology(8, 0, 1, 0, 4).describe(),
              "world 8 = pp 1 x dp 2 x tp 4 (1 replicas x zero_group_size 2); ZeRO groups [0,4]; "
              "replica groups (0) (4); TP groups {0,1,2,3} {4,5,6,7}");
}

TEST(Topology, RejectsATpThatDoesNotDivide) {
    try {
        Topology(8, 0, 2, 0, 3);
        FAIL() << "no error";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("parallel.tp"), std::string::npos) << e.what();
    }
    EXPECT_THROW(Topology(8, 0, 1, 0, 0), std::invalid_argument);
    EXPECT_THROW(Topology(8, 0, 1, 3, 2), std::invalid_argument);  // zero_group_size 3 of dp 4
}

// Context parallelism inside dp (topology.hpp): cp consecutive dp indices share a data index, and
// the CP group is those ranks of one stage and TP index; the closed form enumerated rank by rank.
TEST(Topology, CpGroupsAreConsecutiveDpIndicesOfOneDataShard) {
    const int world = 16, pp = 2, tp = 2, cp = 2;  // dp 4 per stage: 2 data shards x cp 2
    std::set<V> cp_groups;
    for (int rank = 0; rank < world; ++rank) {
        const Topology t(world, rank, pp, 0, tp, cp);
        ASSERT_EQ(t.dp(), 4);
        ASSERT_EQ(t.data_parallel(), 2);
        EXPECT_EQ(t.cp_index(), t.dp_index() % cp);
        EXPECT_EQ(t.data_index(), t.dp_index() / cp);
        V want;
        for (int c = 0; c < cp; ++c)  // dp index d = data * cp + c, world rank t + tp * (d + dp * s)
            want.push_back(t.tp_index() + tp * ((t.data_index() * cp + c) + 4 * t.stage()));
        EXPECT_EQ(t.cp_group(), want) << "rank " << rank;
        EXPECT_EQ(t.cp_group()[size_t(t.cp_index())], rank);
        cp_groups.insert(t.cp_group());
    }
    EXPECT_EQ(cp_groups.size(), 8u);  // world / cp groups, disjoint
    EXPECT_EQ(Topology(4, 0, 1, 0, 1, 2).describe(),
              "world 4 = pp 1 x dp 4 (2 data x cp 2) (1 replicas x zero_group_size 4); ZeRO groups [0,1,2,3]; "
              "replica groups (0) (1) (2) (3)");
    EXPECT_THROW(Topology(6, 0, 1, 0, 1, 4), std::invalid_argument);  // cp 4 of dp 6
}

}  // namespace
}  // namespace llmtrain
