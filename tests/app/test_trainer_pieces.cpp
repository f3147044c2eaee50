// tests/app/test_trainer_pieces.cpp — Trainer::Impl's owned pieces that are plain values, against
// hand-worked figures: TrainProgress (app/trainer_progress.hpp: advance, count_skip, resume, record),
// the checkpoint part index (app/trainer_checkpoints.hpp checkpoint_part, checkpoint_parts), and the
// door's refusal of a ZeRO group that expert parallelism does not divide (app/config/world.cpp
// resolve_world). No ranks, no files. Exact comparisons: integers and strings only.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "app/config/world.hpp"
#include "app/trainer_checkpoints.hpp"
#include "app/trainer_progress.hpp"

namespace llmtrain {
namespace {

TEST(TrainProgress, AdvancesCountsSkipsAndRecords) {
    TrainProgress p;
    EXPECT_EQ(p.step, 0);
    EXPECT_EQ(p.start_step, 0);
    EXPECT_EQ(p.tokens_seen, 0u);
    EXPECT_EQ(p.restarts, 0);
    EXPECT_FALSE(p.run_id.empty());
    // Three steps of a global batch of 8 sequences x 64 tokens = 512 tokens each: 1536 seen.
    for (int i = 0; i < 3; ++i) p.advance(512);
    EXPECT_EQ(p.step, 3);
    EXPECT_EQ(p.start_step, 0);  // advance leaves where this process started alone
    EXPECT_EQ(p.tokens_seen, 1536u);
    // Skips in a row: 1, 2, then an update resets, then 1 again.
    EXPECT_EQ(p.count_skip(false), 1);
    EXPECT_EQ(p.count_skip(false), 2);
    EXPECT_EQ(p.skipped_in_a_row, 2);
    EXPECT_EQ(p.count_skip(true), 0);
    EXPECT_EQ(p.count_skip(false), 1);
    TrainState st;
    p.record(st);
    EXPECT_EQ(st.step, 3);
    EXPECT_EQ(st.tokens_seen, 1536u);
    EXPECT_EQ(st.run_id, p.run_id);
    EXPECT_EQ(st.restarts, 0);
}

TEST(TrainProgress, ResumeTakesTheCheckpointsCountersAndOneRestartMore) {
    TrainState st;
    st.step = 250;
    st.tokens_seen = 250u * 4096u;
    st.run_id = "20261206-065300-abcd";
    st.restarts = 2;
    TrainProgress p;
    p.advance(7);  // whatever came before is replaced
    p.resume(st);
    EXPECT_EQ(p.step, 250);
    EXPECT_EQ(p.start_step, 250);
    EXPECT_EQ(p.tokens_seen, 1024000u);
    EXPECT_EQ(p.run_id, "20261206-065300-abcd");
    EXPECT_EQ(p.restarts, 3);
    p.advance(4096);
    TrainState out;
    p.record(out);
    EXPECT_EQ(out.step, 251);
    EXPECT_EQ(out.tokens_seen, 1028096u);
    EXPECT_EQ(out.restarts, 3);
    EXPECT_EQ(out.run_id, "20261206-065300-abcd");
    // A format-1 checkpoint has no run id: the process's own is kept.
    TrainState old;
    old.step = 10;
    TrainProgress q;
    const std::string own = q.run_id;
    q.resume(old);
    EXPECT_EQ(q.run_id, own);
    EXPECT_EQ(q.restarts, 1);
}

TEST(CheckpointPart, StageMajorThenTpIndexThenZeroIndex) {
    // pp 2, N (ZeRO group) 2, tp 2: 8 writers; hand-worked k = stage*4 + tp_index*2 + zero_index.
    EXPECT_EQ(checkpoint_parts(2, 2, 2), 8);
    EXPECT_EQ(checkpoint_part(0, 0, 0, 2, 2), 0);
    EXPECT_EQ(checkpoint_part(0, 0, 1, 2, 2), 1);
    EXPECT_EQ(checkpoint_part(0, 1, 0, 2, 2), 2);
    EXPECT_EQ(checkpoint_part(0, 1, 1, 2, 2), 3);
    EXPECT_EQ(checkpoint_part(1, 0, 0, 2, 2), 4);
    EXPECT_EQ(checkpoint_part(1, 1, 1, 2, 2), 7);
    // tp 1: k = stage x N + zero_index (ZeRO-1 pp 2 x dp 2: parts 0..3).
    EXPECT_EQ(checkpoint_part(1, 0, 1, 2, 1), 3);
    // ZeRO stage 0 (a group of one), pp 3, tp 4: k = stage*4 + tp_index.
    EXPECT_EQ(checkpoint_part(2, 3, 0, 1, 4), 11);
    EXPECT_EQ(checkpoint_parts(3, 1, 4), 12);
    // Every writer of pp 2 x N 3 x tp 2 gets its own part, 0..11.
    std::set<int> seen;
    for (int s = 0; s < 2; ++s)
        for (int t = 0; t < 2; ++t)
            for (int z = 0; z < 3; ++z) seen.insert(checkpoint_part(s, t, z, 3, 2));
    EXPECT_EQ(seen.size(), 12u);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), 11);
}

/// The ConfigError message of resolve_world on `world` ranks for a MoE Llama with `sets`, or "" when accepted.
std::string world_error(int world, std::vector<std::string> sets) {
    sets.insert(sets.begin(), {"model.arch=\"llama\"", "model.moe.n_experts=4"});
    Config c = load_config("", sets);
    try {
        resolve_world(c, world, "the number of ranks (" + std::to_string(world) + ")", true);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

TEST(ResolveWorld, RefusesAZeroGroupThatEpDoesNotDivide) {
    // dp 8, ep 4: the ranks holding the same experts are zero_group_size / ep of a ZeRO group, so a
    // group of 2 (a divisor of dp, accepted without ep) is refused naming both keys.
    const std::string e = world_error(8, {"parallel.ep=4", "parallel.zero_stage=1", "parallel.zero_group_size=2"});
    EXPECT_NE(e.find("parallel.zero_group_size: with parallel.ep = 4 expected 0 or a multiple of parallel.ep"),
              std::string::npos) << e;
    EXPECT_NE(e.find("got 2"), std::string::npos) << e;
    EXPECT_EQ(world_error(8, {"parallel.zero_stage=1", "parallel.zero_group_size=2"}), "");  // no ep: fine
    // Multiples of ep that divide dp are accepted, and 0 (all of dp).
    EXPECT_EQ(world_error(8, {"parallel.ep=4", "parallel.zero_stage=1", "parallel.zero_group_size=4"}), "");
    EXPECT_EQ(world_error(8, {"parallel.ep=4", "parallel.zero_stage=1", "parallel.zero_group_size=8"}), "");
    EXPECT_EQ(world_error(8, {"parallel.ep=4", "parallel.zero_stage=3", "parallel.zero_group_size=0"}), "");
    EXPECT_EQ(world_error(4, {"parallel.ep=2", "parallel.zero_stage=1", "parallel.zero_group_size=2"}), "");
    // ep 2 at dp 8 with a group of 1 is no group (ZeRO over one rank): not refused for ep.
    EXPECT_EQ(world_error(8, {"parallel.ep=2", "parallel.zero_stage=1", "parallel.zero_group_size=1"}), "");
}

}  // namespace
}  // namespace llmtrain
