// tests/parallel/test_replicas.cpp — replicas that cannot drift (docs/distributed.md "One clip scale
// across dp"): sub-DP 2x2 on 4 ranks (ZeRO groups [0,1] and [2,3], replicas (0,2) and (1,3)) with
// ZeRO group [2,3]'s sums one unit in the last place higher than [0,1]'s would be, as two NCCL
// communicators summing in different orders may give. After each of 4 steps at a clipping
// grad_clip, every dp rank must hold bitwise the same gradient norm (so the same clip scale), and
// after the last one each rank's parameter shard must equal its replica's bit for bit.
// Tolerance 0: the replicas hold the same shard, reduced by the same replica all-reduce, so only a
// clip scale computed per ZeRO group could tell them apart.
//
// Built twice: test_replicas (CPU backend, MpiComm; the perturbation is MpiComm's test seam
// set_mpi_perturbed_group) and test_replicas_emu (-DLLMTRAIN_REPLICAS_CUDA: the CUDA backend under
// cuda_emu, NcclComm; run with CUDA_EMU_NCCL_PERTURB=2,3).
#include <gtest/gtest.h>
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <random>

#include "app/state/model_state.hpp"
#include "model/backend.hpp"
#include "optim/grad_clip.hpp"
#include "parallel/mpi_comm_testing.hpp"

namespace llmtrain {
namespace {

#ifdef LLMTRAIN_REPLICAS_CUDA
constexpr const char* kBackend = "cuda";
#else
constexpr const char* kBackend = "cpu";
#endif

Config tiny() {
    Config c;
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 32;
    c.model.seq_len = 16;
    c.model.vocab_size = 301;
    c.training.micro_batch_size = 2;
    return c;
}

/// Whether every rank passed the same bits of x.
bool same_on_every_rank(float x) {
    uint32_t bits, lo, hi;
    std::memcpy(&bits, &x, 4);
    MPI_Allreduce(&bits, &lo, 1, MPI_UINT32_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&bits, &hi, 1, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

TEST(Replicas, OneClipScaleKeepsReplicasBitwiseEqual) {
    const int W = world_size(), me = world_rank();
    ASSERT_EQ(W, 4) << "run under mpirun -np 4";
#ifndef LLMTRAIN_REPLICAS_CUDA
    set_mpi_perturbed_group({2, 3});
#endif
    const float grad_clip = 1e-3f;  // far below the tiny model's gradient norm: every step clips
    for (int stage = 1; stage <= 3; ++stage) {
        Config cfg = tiny();
        cfg.parallel.zero_stage = stage;
        cfg.parallel.zero_group_size = 2;
        auto ops = make_backend(kBackend, "fp32");
        Allocator alloc(*ops);
        const Topology topo(W, me, 1, zero_group_of(cfg));
        const CommFactory comms = [&](const std::vector<int>& ranks, bool host) {
            return host ? make_mpi_comm(ranks) : make_comm(*ops, ranks);
        };
        ModelState s = make_model_state(cfg, run_shape(cfg, topo.world_size()), alloc, topo, comms);
        s.gpt->init_params(7);
        s.adam->init_state(s.engine->param_shard());
        float* scratch = static_cast<float*>(alloc.alloc(MemCategory::workspace, 4));
        std::mt19937 rng(1234 + topo.dp_index());  // each dp rank its own data
        std::vector<int> tok(32), tgt(32);
        for (int step = 0; step < 4; ++step) {
            s.engine->begin_step();
            for (int i = 0; i < 32; ++i) tok[i] = int(rng() % 301), tgt[i] = int(rng() % 301);
            s.gpt->forward_backward(tok.data(), tgt.data(), 1.0f / 32);
            s.engine->reduce_grads();
            // As the trainer: the norm of the dp-mean gradient, and the scale that clips it.
            const float norm = std::sqrt(s.engine->grad_norm_squared(scratch)) / float(W);
            const float scale = clip_scale(norm, grad_clip) / float(W);
            ASSERT_LT(clip_scale(norm, grad_clip), 1.0f) << "the step must clip, or the norm changes nothing";
            EXPECT_TRUE(same_on_every_rank(norm)) << "ZeRO-" << stage << " step " << step << ": rank " << me
                                                  << " gradient norm " << norm;
            s.adam->step(s.engine->param_shard(), s.engine->grad_shard(), 1e-3f, scale);
            s.engine->gather_params();
        }
        alloc.release(scratch);
        const size_t n = s.engine->shard_numel();
        std::vector<float> mine(n), theirs(n);
        ops->memcpy_d2h(mine.data(), s.engine->param_shard(), n * 4);
        ops->synchronize();
        const int partner = topo.rank_of(0, 1 - topo.replica(), topo.zero_index());
        MPI_Sendrecv(mine.data(), int(n), MPI_FLOAT, partner, 0, theirs.data(), int(n), MPI_FLOAT, partner, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        size_t differ = 0;
        for (size_t i = 0; i < n; ++i) differ += std::memcmp(&mine[i], &theirs[i], 4) != 0;
        EXPECT_EQ(differ, 0u) << "ZeRO-" << stage << ": rank " << me << " and its replica (rank " << partner
                              << ") differ in " << differ << " of " << n << " parameters after 4 steps";
    }
}

}  // namespace
}  // namespace llmtrain
