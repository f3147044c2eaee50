// tests/parallel/test_zero_engine.cpp — the ZeRO engine's traffic and memory against closed-form
// formulas (docs/distributed.md "ZeRO: the gradient flow"), under mpirun with 2 or 4 ranks, CPU backend.
//
// One optimizer step (a micro-batches of random tokens, reduce, AdamW, gather) per (stage, group),
// then the bytes each Comm counted (CommStats) per kind of collective, and the Allocator's bytes
// per category, are compared exactly with the formulas in Ψ (padded parameter count), Ψ₀ (the
// embeddings unit), N (zero_group_size), R (replicas), a (grad_accum_steps), es = 4 (fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "app/state/model_state.hpp"
#include "model/backend.hpp"
#include "model/bf16.hpp"

namespace llmtrain {
namespace {

Config tiny() {
    Config c;
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 36;  // odd sizes: every unit is padded for each group size
    c.model.seq_len = 16;
    c.model.vocab_size = 301;
    c.training.micro_batch_size = 2;
    return c;
}

struct Case {
    int stage, group, accum;
};

/// The CPU backend's Comms: MPI for every group.
const CommFactory mpi_comms = [](const std::vector<int>& ranks, bool) { return make_mpi_comm(ranks); };

void one_step(const Case& k) {
    const int W = world_size(), me = world_rank();
    Config cfg = tiny();
    cfg.parallel.zero_stage = k.stage;
    cfg.parallel.zero_group_size = k.stage == 0 ? 0 : k.group;
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    Topology topo(W, me, 1, zero_group_of(cfg));
    ModelState s = make_model_state(cfg, run_shape(cfg, topo.world_size()), alloc, topo, mpi_comms);
    s.gpt->init_params(7);  // stages 1, 2: each rank draws its shard and all-gathers the rest
    s.adam->init_state(s.engine->param_shard());
    const auto z0 = s.zero_comm->stats().bytes;  // the step's traffic is counted from here
    const double N = topo.zero_group_size(), R = topo.replicas(), es = 4, a = k.accum;
    const double psi = double(s.layout->total_numel()), psi0 = double(s.layout->units()[0].numel);
    // Memory: what each stage keeps (zero.hpp), fp32 without master weights (m and v: 8 bytes each).
    const double shard = psi / N;
    const double params = (k.stage <= 2 ? psi : 0) + (k.stage >= 1 ? shard : 0);
    const double grads = (k.stage <= 1 ? psi : 0) + (k.stage >= 1 ? shard : 0);
    EXPECT_EQ(double(alloc.current(MemCategory::params)), params * es);
    EXPECT_EQ(double(alloc.current(MemCategory::grads)), grads * es);
    EXPECT_EQ(double(alloc.current(MemCategory::optimizer)), 2 * shard * es);
    if (k.stage >= 2) EXPECT_GT(alloc.current(MemCategory::comm), 0u);
    else EXPECT_EQ(alloc.current(MemCategory::comm), 0u);

    std::mt19937 rng(1234 + me);
    std::vector<int> tok(32), tgt(32);
    s.engine->begin_step();
    for (int m = 0; m < k.accum; ++m) {
        for (int i = 0; i < 32; ++i) tok[i] = int(rng() % 301), tgt[i] = int(rng() % 301);
        s.gpt->forward_backward(tok.data(), tgt.data(), 1.0f / 64);
    }
    s.engine->reduce_grads();
    float* scratch = static_cast<float*>(alloc.alloc(MemCategory::workspace, 4));
    const float nsq = s.engine->grad_norm_squared(scratch);
    alloc.release(scratch);
    EXPECT_TRUE(std::isfinite(nsq) && nsq > 0);
    s.adam->step(s.engine->param_shard(), s.engine->grad_shard(), 1e-3f, 1.0f / float(W));
    s.engine->gather_params();

    const auto& z = s.zero_comm->stats().bytes;
    const auto& r = s.replica_comm->stats().bytes;
    const double f = (N - 1) / N * es;  // bytes per element of a reduce-scatter or all-gather
    const double rs = k.stage >= 2 ? a * psi : k.stage == 1 ? psi : 0;
    const double ag = k.stage == 3 ? 2 * a * (psi - psi0) + psi0 : k.stage >= 1 ? psi : 0;
    EXPECT_EQ(double(z[int(CommOp::reduce_scatter)] - z0[int(CommOp::reduce_scatter)]), rs * f) << "stage " << k.stage;
    EXPECT_EQ(double(z[int(CommOp::all_gather)] - z0[int(CommOp::all_gather)]), ag * f) << "stage " << k.stage;
    const double init_ag = k.stage == 1 || k.stage == 2 ? psi : 0;  // init_params' gather of the full params
    EXPECT_EQ(double(z0[int(CommOp::all_gather)]), init_ag * f) << "stage " << k.stage;
    EXPECT_EQ(double(r[int(CommOp::all_reduce)]), 2 * (R - 1) / R * shard * es) << "replica all-reduce";
    if (me == 0)
        std::printf("stage %d N %g R %g a %d: reduce_scatter %.0f B, all_gather %.0f B, replica all_reduce %.0f B "
                    "(Psi %.0f)\n", k.stage, N, R, k.accum, double(z[int(CommOp::reduce_scatter)] - z0[int(CommOp::reduce_scatter)]),
                    double(z[int(CommOp::all_gather)] - z0[int(CommOp::all_gather)]), double(r[int(CommOp::all_reduce)]), psi);
}

TEST(ZeroEngine, TrafficAndMemoryMatchTheFormulas) {
    const int W = world_size();
    for (int stage = 0; stage <= 3; ++stage)
        for (int accum : {1, 2}) {
            one_step({stage, 0, accum});
            if (stage > 0 && W == 4) one_step({stage, 2, accum});  // sub-DP: 2 groups of 2
        }
}

TEST(ZeroEngine, ReducingDuringTheBackwardGivesTheSameBitsAndStartsEarly) {
    // parallel.overlap_grad_reduce: at stages 0 and 1 each unit's reduction starts in grads_done
    // during the last micro-batch's backward. Reference: the same step (same params, same tokens)
    // reduced after the backward. The reduced gradient must be bitwise the same (per-element
    // rank-order sums either way), and by the end of the backward, before reduce_grads(), one
    // collective per unit must already have been started (the CommStats call count).
    const int W = world_size(), me = world_rank();
    for (int stage : {0, 1})
        for (int accum : {1, 2}) {
            std::vector<std::vector<float>> g(2);
            for (int early = 0; early < 2; ++early) {
                Config cfg = tiny();
                cfg.parallel.zero_stage = stage;
                auto ops = make_backend("cpu", "fp32");
                Allocator alloc(*ops);
                Topology topo(W, me, 1, zero_group_of(cfg));
                ModelState s = make_model_state(cfg, run_shape(cfg, topo.world_size()), alloc, topo, mpi_comms);
                s.gpt->init_params(7);
                Comm& c = stage == 0 ? *s.replica_comm : *s.zero_comm;
                const CommOp op = stage == 0 ? CommOp::all_reduce : CommOp::reduce_scatter;
                std::mt19937 rng(99 + me);
                std::vector<int> tok(32), tgt(32);
                s.engine->begin_step();
                for (int m = 0; m < accum; ++m) {
                    for (int i = 0; i < 32; ++i) tok[i] = int(rng() % 301), tgt[i] = int(rng() % 301);
                    s.engine->reduce_during_backward(early && m == accum - 1);
                    s.gpt->forward_backward(tok.data(), tgt.data(), 1.0f / 64);
                }
                const uint64_t started = c.stats().calls[int(op)];
                s.engine->reduce_grads();
                EXPECT_EQ(started, early ? s.layout->units().size() : 0u) << "stage " << stage << " accum " << accum;
                const float* gs = static_cast<const float*>(s.engine->grad_shard());
                g[early].assign(gs, gs + s.engine->shard_numel());
            }
            EXPECT_EQ(g[0], g[1]) << "stage " << stage << " accum " << accum << ": not bitwise";
        }
}

TEST(ZeroEngine, DryRunCountsWhatTheRealRunAllocates) {
    // estimate_memory builds rank 0 over the counting backend; a real rank 0 must hold the same bytes.
    // Its host memory also counts the checkpoint snapshot when checkpoints are on, which the trainer's
    // saver (not the model state) reserves: 12 bytes per element of rank 0's optimizer shard (w, m, v
    // in fp32); so the model state is compared with checkpoints off, the snapshot on rank 0.
    const int W = world_size(), me = world_rank();
    for (int stage = 0; stage <= 3; ++stage) {
        Config cfg = tiny();
        cfg.parallel.zero_stage = stage;
        Config off = cfg;
        off.checkpoint.interval = 0;
        off.checkpoint.at_end = false;
        const auto want = estimate_memory(off, run_shape(off, W));
        const auto with_snapshot = estimate_memory(cfg, run_shape(cfg, W));
        auto ops = make_backend("cpu", "fp32");
        Allocator alloc(*ops);
        Topology topo(W, me, 1, zero_group_of(cfg));
        ModelState s = make_model_state(cfg, run_shape(cfg, topo.world_size()), alloc, topo, mpi_comms);
        for (int c = 0; c < int(MemCategory::count); ++c) {
            EXPECT_EQ(alloc.current(MemCategory(c)), want[c]) << "stage " << stage << " " << mem_category_name(MemCategory(c));
            if (MemCategory(c) != MemCategory::host) {
                EXPECT_EQ(with_snapshot[c], want[c]) << "stage " << stage;
            }
        }
        if (me == 0) {
            EXPECT_EQ(with_snapshot[int(MemCategory::host)] - want[int(MemCategory::host)], 12 * s.adam->numel())
                << "stage " << stage;
        }
    }
}

TEST(ZeroEngine, CastReductionInPiecesIsExactAndKeepsItsBuffersToAPiece) {
    // grad_reduce_dtype bf16 under the CPU backend's fp32, stages 0-3 (ZeRO group: the world, one rank
    // at stage 0). Rank r's gradient at flat index x is g(r, x) (below). MpiComm sums each element in fp32 in
    // rank order and rounds to bf16 once, so the reduced value must be bf16(sum_r bf16(g(r, x))),
    // computed here on the host; with pieces of 1,001 elements (several per large chunk, the last one short; ln_f in one) and
    // with the default (one per chunk at this size), bit for bit. The cast buffers (comm at stages 0
    // and 1) are p elements of bf16, plus N p for the reduce-scatter's send at stage 1.
    const int W = world_size(), me = world_rank();
    const ParamLayout layout(gpt_config_of(tiny()), 8 * W);
    // Integer hash over one division: no expression the compiler could contract differently here and
    // in the fill loop. Values in (-25, 25) with more bits than bf16 keeps.
    auto g = [](int r, size_t x) {
        const uint32_t h = uint32_t(x) * 2654435761u + uint32_t(r) * 40503u;
        return float(int(h % 200001u) - 100000) / 4099.0f;
    };
    auto ops = make_backend("cpu", "fp32");
    for (int stage = 0; stage <= 3; ++stage) {
        const int N = stage == 0 ? 1 : W;
        const Topology topo(W, me, 1, N);
        auto zero = make_mpi_comm(topo.zero_group());
        auto replica = make_mpi_comm(topo.replica_group());
        size_t max_chunk = 0;
        for (const FlatRange& r : layout.shard(zero->rank(), N)) max_chunk = std::max(max_chunk, r.numel);
        for (size_t piece : {size_t(1001), size_t(0)}) {
            Allocator alloc(*ops);
            ZeroOptions zo;
            zo.stage = stage;
            zo.reduce_dtype = DType::bf16;
            if (piece > 0) zo.reduce_piece_bytes = piece * size_t(N) * 2;
            ZeroEngine e(alloc, layout, *zero, *replica, zo);
            const size_t p = piece > 0 ? piece : max_chunk;
            if (stage <= 1) {
                EXPECT_EQ(alloc.current(MemCategory::comm), (stage == 1 ? size_t(N) + 1 : 1) * p * 2)
                    << "stage " << stage << ", piece " << piece;
            }
            e.begin_step();
            for (size_t u = 0; u < layout.units().size(); ++u) {
                const auto& unit = layout.units()[u];
                std::vector<float> mine(unit.numel);
                for (size_t x = 0; x < unit.numel; ++x) mine[x] = g(me, unit.offset + x);
                ops->memcpy_h2d(e.acquire_grads(int(u)), mine.data(), unit.numel * 4);
                e.grads_done(int(u));
            }
            e.reduce_grads();
            std::vector<float> got(e.shard_numel());
            ops->memcpy_d2h(got.data(), e.grad_shard(), got.size() * 4);
            ops->synchronize();
            size_t i = 0;
            for (const FlatRange& r : e.shard())
                for (size_t x = r.offset; x < r.offset + r.numel; ++x, ++i) {
                    float sum = 0;
                    for (int k = 0; k < W; ++k) sum += bf16_to_f32(f32_to_bf16(g(k, x)));
                    ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(sum)))
                        << "stage " << stage << ", piece " << piece << ", flat index " << x;
                }
            ASSERT_EQ(i, got.size());
        }
    }
}

}  // namespace
}  // namespace llmtrain
