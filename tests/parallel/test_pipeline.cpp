// tests/parallel/test_pipeline.cpp — one pipeline stage per rank (mpirun -np P, CPU backend, MpiComm
// links) against the whole model in one process, which every rank computes itself as the reference:
// m micro-batches' forwards and backwards, then
//  - the loss (sum of the micro-batches' means) at the last stage: bitwise equal;
//  - each stage's layer and ln_f gradients: bitwise equal (every stage adds the micro-batches in the
//    one-process order: backwards run in ascending micro-batch order);
//  - the tied wte's gradient, summed over the first and last stage (embedding + LM head parts):
//    the one-process run adds the two parts micro-batch by micro-batch, the pipeline each part over
//    all micro-batches first, so fp32 reassociation: relative 1e-5 of the tensor's largest entry;
//  - the executed order of forwards and backwards equals stage_schedule()'s;
//  - eval (forward only) and logits through every stage equal the whole model's, bitwise.
// For P = world size, m in {1, P-1, P, 2P+1}, 1F1B and GPipe, even and uneven splits, per-stage
// checkpointed-layer counts; and with documents (document masking and positions restarting per
// document, GPTOptions::doc_mask / doc_positions): every stage finds the boundaries in the windows
// (GPT::set_documents), bitwise the whole model's, and a later stage's forward without them is a
// std::logic_error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "parallel/pipeline.hpp"

namespace llmtrain {
namespace {

constexpr int kB = 2, kT = 8;
GPTConfig config() {
    GPTConfig c;
    c.n_layer = 5;
    c.n_head = 2;
    c.n_embd = 16;
    c.seq_len = kT;
    c.vocab_size = 37;
    return c;
}

void batch(int i, int* in, int* tgt) {
    std::mt19937 rng(500 + i);
    for (int k = 0; k < kB * kT; ++k) in[k] = int(rng() % 37), tgt[k] = int(rng() % 37);
}

constexpr int kEos = 36;  // the documents' end in the cases with documents
/// batch() with an EOS every 5 tokens (shifted per micro-batch): 3 or 4 documents per row of 8.
void batch_docs(int i, int* in, int* tgt) {
    batch(i, in, tgt);
    for (int k = 0; k < kB * kT; ++k)
        if ((k + i) % 5 == 0) in[k] = kEos;
}

std::vector<float> host(Ops& ops, const void* p, size_t n) {
    std::vector<float> h(n);
    ops.memcpy_d2h(h.data(), p, n * 4);
    ops.synchronize();
    return h;
}

struct Case {
    PipelineSchedule schedule;
    int m;
    std::vector<int> layers;  // per stage
    std::vector<int> ckpt;    // per stage
    bool docs = false;        // document masking and positions restarting per document (batch_docs)
};

void run_case(const Case& c) {
    const int P = world_size(), s = world_rank();
    SCOPED_TRACE("stage " + std::to_string(s) + " m " + std::to_string(c.m));
    const GPTConfig cfg = config();
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    // Reference: the whole model, one micro-batch at a time.
    GPTOptions o;
    o.B = kB;
    o.T = kT;
    if (c.docs) o.doc_eos = kEos, o.doc_mask = o.doc_positions = true;
    const PipelineStage::Batches next = c.docs ? batch_docs : batch;
    GPT whole(cfg, o, alloc);
    whole.init_params(3);
    whole.zero_grads();
    std::vector<int> in(kB * kT), tgt(kB * kT);
    const float dloss = 1.0f / float(kB * kT * c.m);
    double want_loss = 0;
    for (int i = 0; i < c.m; ++i) {
        next(i, in.data(), tgt.data());
        whole.forward_backward(in.data(), tgt.data(), dloss);
    }
    want_loss = whole.take_loss_sum();
    // This rank's stage.
    int l0 = 0;
    for (int k = 0; k < s; ++k) l0 += c.layers[k];
    o.l0 = l0;
    o.l1 = l0 + c.layers[s];
    o.checkpoint_layers = c.ckpt[s];
    o.contexts = max_in_flight(c.schedule, s, P, c.m);
    const size_t act_before = alloc.current(MemCategory::activations);
    GPT stage(cfg, o, alloc);
    // Activation bytes: micro-batches in flight (1F1B: min(P - s, m); GPipe: m), each holding the
    // residual stream at every layer boundary, what each kept (not recomputed) layer saves, and the
    // token ids (first stage) or ln_f output, logits and losses (last stage). fp32, N = B*T rows.
    {
        auto a256 = [](size_t b) { return (b + 255) / 256 * 256; };
        const size_t N = kB * kT, C = cfg.n_embd, n_local = size_t(c.layers[s]), Vp = cfg.padded_vocab_size();
        const size_t per_layer = 4 * a256(N * C * 4) + a256(N * 3 * C * 4) + 2 * a256(N * 4 * C * 4) +
                                 4 * a256(N * 4) + a256(size_t(kB) * cfg.n_head * kT * 4);
        size_t per_context = (n_local + 1) * N * C * 4 + (n_local - size_t(c.ckpt[s])) * per_layer;
        if (s == 0) per_context += N * 4;
        if (c.docs) per_context += 2 * N * 4;  // doc_start and pos
        if (s == P - 1) per_context += N * C * 4 + 3 * N * 4 + N * Vp * 4;
        const size_t in_flight = c.schedule == PipelineSchedule::gpipe ? size_t(c.m) : size_t(std::min(P - s, c.m));
        EXPECT_EQ(alloc.current(MemCategory::activations) - act_before, in_flight * per_context);
    }
    stage.init_params(3);
    stage.zero_grads();
    // Links: two 2-rank Comms per neighbour pair, made in pair order on every rank.
    std::vector<std::unique_ptr<Comm>> comms;
    PipelineLinks links;
    for (int p = 0; p + 1 < P; ++p) {
        if (s != p && s != p + 1) continue;
        auto act = make_mpi_comm({p, p + 1}), grad = make_mpi_comm({p, p + 1});
        if (s == p) links.act_next = act.get(), links.grad_next = grad.get();
        else links.act_prev = act.get(), links.grad_prev = grad.get();
        comms.push_back(std::move(act));
        comms.push_back(std::move(grad));
    }
    PipelineStage pipe(stage, s, P, c.schedule, links);
    pipe.warm_up();
    // Twice: a step leaves nothing behind that changes the next (the checks below see the second).
    for (int step = 0; step < 2; ++step) {
        stage.zero_grads();
        const double loss = pipe.train(c.m, next, dloss);
        if (s == P - 1) EXPECT_EQ(loss, want_loss) << "step " << step;
        else EXPECT_EQ(loss, 0.0);
    }

    std::vector<PipeOp> executed;
    for (const PipeEvent& e : pipe.last_events()) executed.push_back(e.op);
    EXPECT_EQ(executed, stage_schedule(c.schedule, s, P, c.m));

    const ParamLayout& L = whole.layout();
    const auto gw = host(*ops, whole.grads(), L.total_numel()), gs = host(*ops, stage.grads(), L.total_numel());
    for (int l = o.l0; l < o.l1; ++l) {
        const ParamUnit& u = L.units()[size_t(1 + l)];
        EXPECT_TRUE(std::equal(gw.begin() + u.offset, gw.begin() + u.offset + u.numel, gs.begin() + u.offset))
            << "layer " << l;
    }
    if (s == P - 1) {
        const ParamUnit& u = L.units()[size_t(cfg.n_layer + 1)];
        EXPECT_TRUE(std::equal(gw.begin() + u.offset, gw.begin() + u.offset + u.numel, gs.begin() + u.offset)) << "ln_f";
    }
    // wte: embedding part (first stage) + LM-head part (last stage), summed over the two.
    const ParamTensor& wte = L.find("wte");
    std::vector<float> part(gs.begin() + wte.offset, gs.begin() + wte.offset + wte.numel);
    if (s != 0 && s != P - 1) std::fill(part.begin(), part.end(), 0.0f);
    auto all = make_mpi_comm();
    all->all_reduce_sum(part.data(), part.size(), DType::f32);
    float scale = 0;
    for (size_t k = 0; k < wte.numel; ++k) scale = std::max(scale, std::fabs(gw[wte.offset + k]));
    for (size_t k = 0; k < wte.numel; ++k)
        ASSERT_NEAR(part[k], gw[wte.offset + k], 1e-5f * scale) << "wte element " << k;

    // The tied wte: the first and last stage sum their parts of its gradient (as the trainer's
    // embedding group does), then each steps its own copy with AdamW (the first unit's state):
    // the two copies stay bitwise equal.
    if (P > 1 && (s == 0 || s == P - 1)) {
        auto ends = make_mpi_comm({0, P - 1});
        const ParamUnit& u0 = L.units()[0];
        ends->all_reduce_sum(static_cast<float*>(stage.grads()) + u0.offset, u0.numel, DType::f32);
        AdamW adam(alloc, L, AdamWConfig{}, false, {{u0.offset, u0.numel}});
        std::vector<float> w(host(*ops, stage.params(), L.total_numel()));
        std::vector<float> mine(w.begin() + u0.offset, w.begin() + u0.offset + u0.numel);
        adam.init_state(mine.data());
        const auto g0 = host(*ops, static_cast<float*>(stage.grads()) + u0.offset, u0.numel);
        adam.step(mine.data(), g0.data(), 1e-2f, 0.5f);
        adam.step(mine.data(), g0.data(), 1e-2f, 0.5f);
        std::vector<float> other(mine.size());
        if (s == P - 1) ends->send(mine.data(), mine.size(), DType::f32, 0);
        else ends->recv(other.data(), other.size(), DType::f32, 1);
        if (s == 0) {
            EXPECT_EQ(mine, other) << "the two copies of wte differ after the step";
        }
    }

    // Forward only: eval loss and logits at the last stage equal the whole model's.
    next(100, in.data(), tgt.data());
    const float ev = pipe.evaluate(in.data(), tgt.data());
    if (s == P - 1) {
        EXPECT_EQ(ev, whole.evaluate(in.data(), tgt.data()));
    }
    const auto lg = pipe.logits_at(in.data(), kT - 1);
    if (s == P - 1) {
        EXPECT_EQ(lg, whole.logits_at(in.data(), kT - 1));
    } else {
        EXPECT_TRUE(lg.empty());
    }
    if (c.docs && s > 0) {  // nothing read before the check
        EXPECT_THROW(stage.forward(nullptr, nullptr, nullptr, 0.0f, false, 0), std::logic_error);
    }
}

std::vector<int> even_split(int n, int P) {
    std::vector<int> v(size_t(P), n / P);
    for (int k = 0; k < n % P; ++k) v[size_t(k)] += 1;
    return v;
}

TEST(Pipeline, EqualsTheWholeModel) {
    const int P = world_size();
    ASSERT_GE(P, 2) << "run under mpirun -np 2..5";
    ASSERT_LE(P, 5);
    std::vector<int> uneven(size_t(P), 1);
    uneven[size_t(P) - 1] += 5 - P;  // all spare layers on the last stage
    std::vector<int> none(size_t(P), 0), some(size_t(P), 0);
    for (int k = 0; k < P; ++k) some[size_t(k)] = k % 2;  // every other stage recomputes one layer
    for (PipelineSchedule sch : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe})
        for (int m : {1, P - 1, P, 2 * P + 1}) {
            if (m < 1) continue;
            run_case({sch, m, even_split(5, P), none});
            run_case({sch, m, uneven, some});
        }
    for (PipelineSchedule sch : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe})
        run_case({sch, P + 1, uneven, some, true});
}

}  // namespace
}  // namespace llmtrain
