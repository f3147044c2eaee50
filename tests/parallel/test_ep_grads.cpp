// tests/parallel/test_ep_grads.cpp — expert parallelism's sharded parameters (parallel/ep_grads.hpp,
// ParamLayout ep): each EP rank's layout holds the dense tensors whole and only its n_experts/ep
// experts (parameter count dense + experts/ep, the same offsets on every EP rank, its part one run of
// the whole tensor); the ZeRO engine over ExpertDp's groups holds 1/Ne of that; the groups are ranks
// of one EP index that together with the EP group cover dp once. Reference: counts from the ep = 1
// layout by tensor role, and the group rules written out per rank (dp index d = ep·e' + e).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "model/allocator.hpp"
#include "model/dry_ops.hpp"
#include "parallel/ep_grads.hpp"

namespace llmtrain {
namespace {

GPTConfig moe_config() {
    GPTConfig c{2, 4, 32, 16, 100};  // 2 layers, 4 heads, n_embd 32, seq_len 16, vocab 100
    c.arch = Arch::llama;
    c.n_kv_head = 2;
    c.intermediate_size = 48;
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_shared_experts = 1, c.moe_expert_ffn = 24;
    return c;
}

bool expert_role(const ParamTensor& t) { return t.role == TensorRole::moe_w13 || t.role == TensorRole::moe_w2; }

TEST(EpLayout, EachRankHoldsTheDenseTensorsAndItsExperts) {
    const GPTConfig c = moe_config();
    const ParamLayout whole(c);
    size_t dense = 0, experts = 0;
    for (const ParamTensor& t : whole.tensors()) (expert_role(t) ? experts : dense) += t.numel;
    ASSERT_EQ(experts, size_t(2 * 4 * 3 * 24 * 32));  // layers x E x (2Fe + Fe) x C
    for (int ep : {2, 4}) {
        std::vector<std::vector<float>> rebuilt(whole.tensors().size());
        for (int e = 0; e < ep; ++e) {
            const ParamLayout L(c, 16, 1, 0, ep, e);
            const ParamLayout L0(c, 16, 1, 0, ep, 0);
            EXPECT_EQ(L.num_parameters(), dense + experts / size_t(ep)) << "ep " << ep << " rank " << e;
            EXPECT_EQ(L.total_numel(), L0.total_numel());
            ASSERT_EQ(L.tensors().size(), whole.tensors().size());
            for (size_t i = 0; i < L.tensors().size(); ++i) {
                const ParamTensor &t = L.tensors()[i], &w = whole.tensors()[i];
                EXPECT_EQ(t.offset, L0.tensors()[i].offset) << t.name;  // the same offsets on every EP rank
                EXPECT_EQ(t.expert, expert_role(t)) << t.name;
                EXPECT_EQ(t.full_shape, w.shape) << t.name;
                EXPECT_EQ(t.numel, t.expert ? w.numel / size_t(ep) : w.numel) << t.name;
                if (t.expert) {
                    EXPECT_EQ(t.shape[0], 4 / ep) << t.name;
                }
                // One contiguous stretch of the whole tensor (at tp 1 a row-split tensor's runs are its rows).
                const size_t first = t.expert ? size_t(e) * t.numel : 0;
                size_t n = 0;
                for (const TPRun& q : L.local_runs(t, 0, t.numel)) {
                    EXPECT_EQ(q.full, first + q.local) << t.name;
                    n += q.count;
                }
                EXPECT_EQ(n, t.numel) << t.name;
                // cut_local then place_local of every EP rank rebuilds the whole tensor.
                std::vector<float> full(w.numel), local(t.numel);
                std::iota(full.begin(), full.end(), 1.0f);
                L.cut_local(t, full.data(), local.data());
                rebuilt[i].resize(w.numel, 0.0f);
                L.place_local(t, local.data(), rebuilt[i].data());
            }
        }
        for (size_t i = 0; i < rebuilt.size(); ++i)
            for (size_t k = 0; k < rebuilt[i].size(); ++k)
                ASSERT_EQ(rebuilt[i][k], float(k + 1)) << whole.tensors()[i].name << " element " << k;
    }
    EXPECT_THROW(ParamLayout(c, 1, 1, 0, 3, 0), std::invalid_argument);  // 3 does not divide 4 experts
    EXPECT_THROW(ParamLayout(c, 1, 1, 0, 2, 2), std::invalid_argument);
    GPTConfig dense_cfg = c;
    dense_cfg.moe_experts = 0, dense_cfg.moe_top_k = 0, dense_cfg.moe_shared_experts = 0, dense_cfg.moe_expert_ffn = 0;
    EXPECT_THROW(ParamLayout(dense_cfg, 1, 1, 0, 2, 0), std::invalid_argument);
}

TEST(ExpertDp, GroupsAreRanksOfOneEpIndexThatCoverDpOnce) {
    const int W = 8;
    for (int zg : {1, 2, 4, 8})
        for (int ep : {2, 4}) {
            if (zg > 1 && zg % ep != 0) {
                const Topology t(W, 0, 1, zg);
                EXPECT_THROW(expert_dp_of(t, ep), std::invalid_argument) << "zg " << zg << " ep " << ep;
                continue;
            }
            const int Ne = zg > 1 ? zg / ep : 1;
            std::set<int> writers;
            for (int r = 0; r < W; ++r) {
                const Topology t(W, r, 1, zg);
                const ExpertDp x = expert_dp_of(t, ep);
                const std::string at = "zg " + std::to_string(zg) + " ep " + std::to_string(ep) + " rank " + std::to_string(r);
                EXPECT_EQ(x.ep_index, r % ep) << at;
                EXPECT_EQ(x.zero_size, Ne) << at;
                ASSERT_EQ(int(x.zero_group.size()), Ne) << at;
                ASSERT_EQ(int(x.replica_group.size()), W / ep / Ne) << at;
                // Both groups: ranks of this EP index, this rank among them at its own index.
                const int e2 = r / ep;
                EXPECT_EQ(x.zero_group[size_t(e2 % Ne)], r) << at;
                EXPECT_EQ(x.replica_group[size_t(e2 / Ne)], r) << at;
                for (int m : x.zero_group) {
                    EXPECT_EQ(m % ep, r % ep) << at;
                    EXPECT_EQ(expert_dp_of(Topology(W, m, 1, zg), ep).zero_group, x.zero_group) << at;
                }
                for (int m : x.replica_group) {
                    EXPECT_EQ(m % ep, r % ep) << at;
                    EXPECT_EQ(expert_dp_of(Topology(W, m, 1, zg), ep).replica_group, x.replica_group) << at;
                }
                // At ZeRO stages 1-3 the engine's group is the topology's ZeRO group's ranks of this EP index.
                if (zg > 1) {
                    for (int m : x.zero_group) EXPECT_EQ(m / zg, r / zg) << at;
                }
                EXPECT_EQ(x.writers, ep * Ne) << at;
                EXPECT_EQ(x.writer, r < ep * Ne ? r : -1) << at;
                if (x.writer >= 0) writers.insert(x.writer);
            }
            EXPECT_EQ(int(writers.size()), ep * Ne);
        }
    EXPECT_THROW(expert_dp_of(Topology(4, 0, 1, 1), 3), std::invalid_argument);  // 3 does not divide dp 4
}

// With tensor parallelism each TP index has its own groups (docs/parallelism.md "Mixture of experts
// under tp and cp"): world 8 at tp 2 is dp 4; rank r has TP index r % 2 and dp index r / 2, and its
// groups are the tp-1 world-4 groups of rank r / 2 with every member m at world rank 2m + r % 2. The
// checkpoint writers are the dp indices [0, ep x Ne) with both TP ranks: writer d x 2 + TP index.
TEST(ExpertDp, EachTpIndexHasItsOwnGroups) {
    const int W = 8, T = 2;
    for (int zg : {1, 2, 4})
        for (int r = 0; r < W; ++r) {
            const Topology t(W, r, 1, zg, T);
            const ExpertDp x = expert_dp_of(t, 2), y = expert_dp_of(Topology(W / T, r / T, 1, zg), 2);
            const std::string at = "zg " + std::to_string(zg) + " rank " + std::to_string(r);
            EXPECT_EQ(x.ep_index, y.ep_index) << at;
            EXPECT_EQ(x.zero_size, y.zero_size) << at;
            EXPECT_EQ(x.writers, y.writers * T) << at;
            EXPECT_EQ(x.writer, y.writer < 0 ? -1 : y.writer * T + r % T) << at;
            ASSERT_EQ(x.zero_group.size(), y.zero_group.size()) << at;
            for (size_t i = 0; i < x.zero_group.size(); ++i) EXPECT_EQ(x.zero_group[i], T * y.zero_group[i] + r % T) << at;
            ASSERT_EQ(x.replica_group.size(), y.replica_group.size()) << at;
            for (size_t i = 0; i < x.replica_group.size(); ++i)
                EXPECT_EQ(x.replica_group[i], T * y.replica_group[i] + r % T) << at;
        }
}

// With a pipeline (issue 45) each stage has its own groups, of its own dp ranks: world 8 at pp 2 is
// dp 4 per stage (ranks 4s..4s+3); the groups of a rank of stage s are stage 1-rank's shifted by 4s.
TEST(ExpertDp, EachPipelineStageHasItsOwnGroups) {
    const int W = 8, P = 2;
    for (int zg : {1, 2, 4})
        for (int r = 0; r < W; ++r) {
            const Topology t(W, r, P, zg);
            const ExpertDp x = expert_dp_of(t, 2), y = expert_dp_of(Topology(W / P, r % 4, 1, zg), 2);
            const int base = t.stage() * 4;
            const std::string at = "zg " + std::to_string(zg) + " rank " + std::to_string(r);
            EXPECT_EQ(t.stage(), r / 4) << at;
            EXPECT_EQ(x.ep_index, y.ep_index) << at;
            EXPECT_EQ(x.writers, y.writers) << at;
            EXPECT_EQ(x.writer, y.writer) << at;
            ASSERT_EQ(x.zero_group.size(), y.zero_group.size()) << at;
            for (size_t i = 0; i < x.zero_group.size(); ++i) EXPECT_EQ(x.zero_group[i], base + y.zero_group[i]) << at;
            ASSERT_EQ(x.replica_group.size(), y.replica_group.size()) << at;
            for (size_t i = 0; i < x.replica_group.size(); ++i)
                EXPECT_EQ(x.replica_group[i], base + y.replica_group[i]) << at;
            std::vector<int> ep = t.ep_group(2);  // the all-to-all's ranks: this stage's too
            for (int m : ep) EXPECT_EQ(m / 4, t.stage()) << at;
        }
}

TEST(EpGrads, TheEngineOverTheExpertGroupHoldsItsShareOfTheExperts) {
    // dp 8, ep 2, ZeRO-3 over all dp: each EP index's engine shards over Ne = 4 ranks with its experts.
    const GPTConfig c = moe_config();
    const ParamLayout whole(c);
    size_t dense_total = 0, expert_total = 0;
    for (const ParamTensor& t : whole.tensors()) (t.expert ? expert_total : dense_total) += t.numel;
    auto ops = make_dry_ops(DType::f32);
    Allocator alloc(*ops);
    const int ep = 2, W = 8;
    for (int e = 0; e < ep; ++e) {
        size_t dense = 0, experts = 0;
        for (int r = e; r < W; r += ep) {  // the ranks of EP index e: one engine ZeRO group
            const ExpertDp x = expert_dp_of(Topology(W, r, 1, W), ep);
            ASSERT_EQ(x.zero_size, 4);
            const ParamLayout L(c, 8 * x.zero_size, 1, 0, ep, x.ep_index);
            const int z = int(std::find(x.zero_group.begin(), x.zero_group.end(), r) - x.zero_group.begin());
            const auto zero = make_dry_comm(x.zero_size, z);
            const auto replicas = make_dry_comm(1, 0);
            ZeroOptions zo;
            zo.stage = 3;
            ZeroEngine engine(alloc, L, *zero, *replicas, zo);
            EXPECT_EQ(engine.shard_numel() * size_t(x.zero_size), L.total_numel());
            const auto ep_comm = make_dry_comm(ep, x.ep_index);
            const EpGrads g(engine, *ep_comm, make_dry_comm(ep, x.ep_index), x);
            size_t d = 0, ex = 0;
            for (const FlatRange& p : g.dense_pieces()) d += p.numel;
            for (const FlatRange& p : g.expert_pieces()) ex += p.numel;
            EXPECT_LE(d + ex, engine.shard_numel());  // the rest is padding
            dense += d, experts += ex;
        }
        // Over the group: every dense element once, and this EP index's experts only (E/ep of them).
        EXPECT_EQ(dense, dense_total) << "EP index " << e;
        EXPECT_EQ(experts, expert_total / ep) << "EP index " << e;
    }
}

}  // namespace
}  // namespace llmtrain
