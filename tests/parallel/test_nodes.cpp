// tests/parallel/test_nodes.cpp — NodeMap's texts, local indices and the start log's node report
// (parallel/nodes.hpp, parallel/node_report.hpp) on hand-made node maps; the references are written out by hand from the
// rank order in parallel/topology.hpp (t + tp·(z + zero_group_size·(r + replicas·s))).
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/node_report.hpp"

using namespace llmtrain;

namespace {

/// `nodes` nodes of `per` consecutive ranks each, hosts h0, h1, ...
NodeMap blocks(int nodes, int per) {
    NodeMap m;
    for (int i = 0; i < nodes * per; ++i) m.node_of.push_back(i / per);
    for (int n = 0; n < nodes; ++n) m.host.push_back("h" + std::to_string(n));
    return m;
}

bool has(const std::vector<std::string>& lines, const std::string& part) {
    for (const auto& l : lines)
        if (l.find(part) != std::string::npos) return true;
    return false;
}

const CrossingGroups* kind(const std::vector<CrossingGroups>& g, const std::string& k) {
    for (const auto& c : g)
        if (c.kind == k) return &c;
    return nullptr;
}

}  // namespace

TEST(NodeMap, DescribesAndNamesRanksByNode) {
    NodeMap m = blocks(2, 2);
    EXPECT_EQ(m.describe(), "world 4 on 2 nodes (2 ranks each)");
    EXPECT_TRUE(m.uniform_blocks());
    EXPECT_EQ(m.where({2, 3}), "ranks 2, 3 on node 1 (h1)");
    EXPECT_EQ(m.where({3, 0}), "rank 0 on node 0 (h0); rank 3 on node 1 (h1)");
    EXPECT_EQ(m.nodes_of({0, 1}), std::vector<int>{0});
    EXPECT_EQ(m.nodes_of({1, 2}), (std::vector<int>{0, 1}));
    NodeMap big = blocks(2, 4);
    EXPECT_EQ(big.where({4, 5, 6, 7}), "ranks 4-7 on node 1 (h1)");
    NodeMap rr;  // round-robin: ranks 0, 2 on node 0
    rr.node_of = {0, 1, 0, 1};
    rr.host = {"a", "b"};
    EXPECT_FALSE(rr.uniform_blocks());
    NodeMap uneven;
    uneven.node_of = {0, 0, 0, 1};
    uneven.host = {"a", "b"};
    EXPECT_EQ(uneven.describe(), "world 4 on 2 nodes (3, 1 ranks)");
}

TEST(NodeMap, LocalIndexIsTheRanksPlaceOnItsNode) {
    NodeMap rr;  // round-robin over 2 nodes: node 0 holds 0, 2, 4; node 1 holds 1, 3
    rr.node_of = {0, 1, 0, 1, 0};
    rr.host = {"a", "b"};
    const std::vector<int> want = {0, 0, 1, 1, 2};
    for (int r = 0; r < 5; ++r) EXPECT_EQ(rr.local_index(r), want[r]) << "rank " << r;
    EXPECT_EQ(blocks(2, 4).local_index(6), 2);
    EXPECT_THROW(rr.local_index(5), std::out_of_range);
    // Without MPI (this test never starts it) one process is local rank 0, whatever the launcher says.
    setenv("LOCAL_RANK", "3", 1);
    setenv("MPI_LOCALRANKID", "3", 1);
    EXPECT_EQ(local_rank(), 0);
    unsetenv("LOCAL_RANK");
    unsetenv("MPI_LOCALRANKID");
}

TEST(NodeReport, FlatZero3OverTwoNodesWarnsAndNamesTheFix) {
    // world 4, dp 4, one ZeRO group [0,1,2,3] over nodes {0,1} and {2,3}.
    const Topology t(4, 0, 1, 0, 1);
    const auto g = crossing_groups(t, blocks(2, 2));
    ASSERT_NE(kind(g, "ZeRO"), nullptr);
    EXPECT_EQ(kind(g, "ZeRO")->groups, 1);
    EXPECT_EQ(kind(g, "ZeRO")->cross, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
    EXPECT_EQ(kind(g, "replica"), nullptr) << "one replica: no replica group of two ranks";
    const auto lines = node_report(t, blocks(2, 2), 3);
    EXPECT_EQ(lines.at(0), "nodes: world 4 on 2 nodes (2 ranks each): node 0 (h0) ranks 0,1; node 1 (h1) ranks 2,3");
    EXPECT_TRUE(has(lines, "across nodes: ZeRO groups 1 of 1")) << lines.at(1);
    EXPECT_TRUE(has(lines, "warning: ZeRO-3 group [0,1,2,3] spans nodes 0, 1"));
    EXPECT_TRUE(has(lines, "parallel.zero_group_size = 2 keeps them inside a node"));
    EXPECT_FALSE(has(node_report(t, blocks(2, 2), 1), "warning")) << "ZeRO-1 gathers once a step: no warning";
}

TEST(NodeReport, NodeLocalZeroGroupsSendOnlyReplicasAcross) {
    // zero_group_size 2: ZeRO groups [0,1] [2,3] (one per node), replica groups (0,2) (1,3) across.
    const Topology t(4, 0, 1, 2, 1);
    const auto g = crossing_groups(t, blocks(2, 2));
    EXPECT_TRUE(kind(g, "ZeRO")->cross.empty());
    EXPECT_EQ(kind(g, "replica")->cross, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
    const auto lines = node_report(t, blocks(2, 2), 3);
    EXPECT_TRUE(has(lines, "across nodes: replica groups 2 of 2, data-parallel groups 1 of 1; inside nodes: ZeRO groups"))
        << lines.at(1);
    EXPECT_FALSE(has(lines, "warning"));
}

TEST(NodeReport, TpInsideANodeAndAcross) {
    // tp 2 x dp 2 on 2 nodes of 2: TP groups {0,1} {2,3} inside; dp groups (0,2) (1,3) across.
    const Topology inside(4, 0, 1, 0, 2);
    EXPECT_TRUE(kind(crossing_groups(inside, blocks(2, 2)), "TP")->cross.empty());
    EXPECT_FALSE(has(node_report(inside, blocks(2, 2), 0), "warning"));
    // tp 4 on 4 nodes of 1 rank: the TP group spans every node.
    const Topology across(4, 0, 1, 0, 4);
    const auto lines = node_report(across, blocks(4, 1), 0);
    EXPECT_TRUE(has(lines, "warning: TP group [0,1,2,3] spans nodes 0, 1, 2, 3")) << lines.back();
    EXPECT_TRUE(has(lines, "keep parallel.tp <= the ranks per node (1)"));
}

TEST(NodeReport, PipelineStagePerNodeAndNonBlockLayouts) {
    // pp 2 x dp 2: stage 0 = ranks 0,1 (node 0), stage 1 = ranks 2,3 (node 1): only the stage sends cross.
    const Topology t(4, 0, 2, 0, 1);
    const auto g = crossing_groups(t, blocks(2, 2));
    EXPECT_EQ(kind(g, "pipeline")->cross, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
    EXPECT_TRUE(kind(g, "ZeRO")->cross.empty());
    NodeMap rr;
    rr.node_of = {0, 1, 0, 1};
    rr.host = {"a", "b"};
    EXPECT_TRUE(has(node_report(t, rr, 0), "warning: ranks are not laid out node by node"));
    EXPECT_EQ(node_report(t, blocks(1, 4), 0), std::vector<std::string>{"nodes: world 4 on 1 node"});
    EXPECT_THROW(crossing_groups(t, blocks(1, 2)), std::invalid_argument);
}

TEST(NodeReport, CpGroupsFollowTheLayoutsCp) {
    // world 8 = pp 1 x dp 4 (cp 2 inside it) x tp 2: rank = t + 2·d. The CP groups are the dp indices
    // {0,1} and {2,3} at each TP index: {0,2} {1,3} {4,6} {5,7}.
    const Topology t(8, 0, 1, 0, 2, 2);
    // On 2 nodes of 4 ranks ({0..3}, {4..7}): every CP group inside a node.
    const auto inside = crossing_groups(t, blocks(2, 4));
    ASSERT_NE(kind(inside, "CP"), nullptr);
    EXPECT_EQ(kind(inside, "CP")->groups, 4);
    EXPECT_TRUE(kind(inside, "CP")->cross.empty());
    EXPECT_FALSE(has(node_report(t, blocks(2, 4), 0), "warning: CP"));
    // On 4 nodes of 2 ranks ({0,1}, {2,3}, ...): each CP group spans two nodes, the TP groups do not.
    const auto across = crossing_groups(t, blocks(4, 2));
    EXPECT_EQ(kind(across, "CP")->cross, (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    EXPECT_TRUE(kind(across, "TP")->cross.empty());
    const auto lines = node_report(t, blocks(4, 2), 0);
    EXPECT_TRUE(has(lines, "CP groups 4 of 4")) << lines.at(1);
    EXPECT_TRUE(has(lines, "warning: CP group [0,2] spans nodes 0, 1")) << lines.back();
    // cp 1: a CP group of one rank is left out.
    EXPECT_EQ(kind(crossing_groups(Topology(8, 0, 1, 0, 2), blocks(4, 2)), "CP"), nullptr);
}
