// app/model_state.cpp — building one rank's model state, and the dry-run memory estimate (see model_state.hpp).
#include "app/model_state.hpp"

#include <cstdio>

#include "model/dry_ops.hpp"

namespace llmtrain {

GPTConfig gpt_config_of(const Config& c) {
    GPTConfig g;
    g.n_layer = c.model.n_layer;
    g.n_head = c.model.n_head;
    g.n_embd = c.model.n_embd;
    g.seq_len = c.model.seq_len;
    g.vocab_size = c.model.vocab_size;
    return g;
}

DType precision_dtype(const Config& c) { return c.training.precision == "bf16" ? DType::bf16 : DType::f32; }

int zero_group_of(const Config& c) { return c.parallel.zero_stage == 0 ? 1 : c.parallel.zero_group_size; }

OffloadConfig offload_config_of(const Config& c) {
    OffloadConfig o;
    o.enabled = c.optimizer.offload == "cpu";
    o.fraction = c.optimizer.offload_fraction;
    o.chunk_bytes = size_t(double(c.optimizer.offload_chunk_mb) * 1048576.0);
    o.stochastic_rounding = c.training.stochastic_rounding;
    return o;
}

ModelState make_model_state(const Config& cfg, Allocator& alloc, const Topology& topo, std::unique_ptr<Comm> zero,
                            std::unique_ptr<Comm> replicas) {
    ModelState s;
    const GPTConfig g = gpt_config_of(cfg);
    const int N = topo.zero_group_size();
    GPTOptions go;
    go.B = cfg.training.micro_batch_size;
    go.T = cfg.model.seq_len;
    go.l0 = 0;
    go.l1 = g.n_layer;
    go.checkpoint_ratio = cfg.activation_checkpoint.ratio;
    go.shard_multiple = N > 1 ? 8 * N : 1;  // every shard of a unit 16-byte aligned (8 elements)
    s.layout = std::make_unique<ParamLayout>(g, go.shard_multiple);
    s.zero_comm = std::move(zero);
    s.replica_comm = std::move(replicas);
    ZeroOptions zo;
    zo.stage = cfg.parallel.zero_stage;
    zo.reduce_dtype = cfg.parallel.grad_reduce_dtype == "bf16" ? DType::bf16 : DType::f32;  // validated by the config
    s.engine = std::make_unique<ZeroEngine>(alloc, *s.layout, *s.zero_comm, *s.replica_comm, zo);
    s.gpt = std::make_unique<GPT>(g, go, alloc, s.engine.get());
    AdamWConfig ac;
    ac.lr = cfg.optimizer.lr;
    ac.beta1 = cfg.optimizer.beta1;
    ac.beta2 = cfg.optimizer.beta2;
    ac.eps = cfg.optimizer.eps;
    ac.weight_decay = cfg.optimizer.weight_decay;
    const bool master = alloc.ops().act_dtype() != DType::f32;
    s.adam = std::make_unique<AdamW>(alloc, *s.layout, ac, master, s.engine->shard(), offload_config_of(cfg));
    return s;
}

std::array<size_t, static_cast<int>(MemCategory::count)> estimate_memory(const Config& cfg_in, int world, int stage) {
    Config cfg = cfg_in;
    cfg.parallel.zero_stage = stage;
    if (stage == 0) cfg.parallel.zero_group_size = 0;
    auto ops = make_dry_ops(precision_dtype(cfg));
    std::array<size_t, static_cast<int>(MemCategory::count)> out{};
    {
        Allocator alloc(*ops);
        Topology topo(world, 0, cfg.parallel.pp, zero_group_of(cfg));
        ModelState s = make_model_state(cfg, alloc, topo, make_dry_comm(topo.zero_group_size(), 0),
                                        make_dry_comm(topo.replicas(), 0));
        for (int k = 0; k < int(MemCategory::count); ++k) out[k] = alloc.current(MemCategory(k));
    }
    return out;
}

std::vector<std::string> memory_report(const Config& cfg, int world) {
    std::vector<std::string> out;
    const GPTConfig g = gpt_config_of(cfg);
    const double psi = double(ParamLayout(g).num_parameters());
    const bool bf16 = precision_dtype(cfg) == DType::bf16;
    const double es = bf16 ? 2 : 4, K = bf16 ? 12 : 8;  // optimizer bytes per parameter: master, m, v (fp32: m, v)
    const OffloadConfig off = offload_config_of(cfg);
    const double on_device = off.enabled ? 1.0 - off.fraction : 1.0;  // the share of the optimizer state kept there
    const int zg = cfg.parallel.zero_group_size == 0 ? world / cfg.parallel.pp : cfg.parallel.zero_group_size;
    const double N = zg;
    char buf[400];
    std::snprintf(buf, sizeof buf, "dry run: world %d, %s, %.4g parameters (Psi), micro_batch_size %d x seq_len %d, "
                  "activation_checkpoint.ratio %g, optimizer.offload %s (fraction %g); per rank, MiB:", world,
                  cfg.training.precision.c_str(), psi, cfg.training.micro_batch_size, cfg.model.seq_len,
                  cfg.activation_checkpoint.ratio, cfg.optimizer.offload.c_str(), off.enabled ? off.fraction : 0.0);
    out.push_back(buf);
    std::string head = "stage";
    for (int k = 0; k < int(MemCategory::count); ++k) {
        std::snprintf(buf, sizeof buf, " %11s", mem_category_name(MemCategory(k)));
        head += buf;
    }
    out.push_back(head + " device total | model states   paper formula");
    for (int stage = 0; stage <= 3; ++stage) {
        const auto b = estimate_memory(cfg, world, stage);
        double total = 0;
        std::string row = "    " + std::to_string(stage);
        for (int k = 0; k < int(MemCategory::count); ++k) {
            std::snprintf(buf, sizeof buf, " %11.1f", double(b[k]) / 1048576.0);
            row += buf;
            if (MemCategory(k) != MemCategory::host) total += double(b[k]);
        }
        const double states = double(b[int(MemCategory::params)] + b[int(MemCategory::grads)] +
                                     b[int(MemCategory::optimizer)]);
        // Rajbhandari et al. 2020: DP (es+es+K)Psi; ZeRO-1 es+es+K/N; ZeRO-2 es+(es+K)/N; ZeRO-3
        // (es+es+K)/N; with offload (Ren et al. 2021) the offloaded share of K moves to the host.
        const double n1 = stage == 0 ? 1 : N, Kd = K * on_device;
        const double formula = stage == 0   ? (2 * es + Kd) * psi
                               : stage == 1 ? (2 * es) * psi + Kd * psi / n1
                               : stage == 2 ? es * psi + (es + Kd) * psi / n1
                                            : (2 * es + Kd) * psi / n1;
        std::snprintf(buf, sizeof buf, " %11.1f | %9.1f    %9.1f", total / 1048576.0, states / 1048576.0,
                      formula / 1048576.0);
        out.push_back(row + buf);
    }
    Topology topo(world, 0, cfg.parallel.pp, cfg.parallel.zero_group_size == 0 ? 0 : cfg.parallel.zero_group_size);
    out.push_back("groups at stages 1-3: " + topo.describe());
    if (off.enabled)
        out.push_back("host: the offloaded optimizer state, 12 bytes per parameter of the offloaded share of the "
                      "shard (12 Psi/N x fraction; N = 1 at stage 0), plus 4 pinned staging buffers of "
                      "optimizer.offload_chunk_mb / 2 (bf16) or / 1 (fp32) each");
    out.push_back("(model states = params + grads + optimizer, on the device. Differences to the formula: unit padding, and at stages "
                  "1-2 the params and grads categories also hold this rank's shard buffers (the updated params before "
                  "the all-gather, the reduced gradient). comm holds the ZeRO working buffers and, when "
                  "grad_reduce_dtype differs from the precision, the cast buffers. The CUDA backend adds ~35 MB of "
                  "its own workspaces.)");
    return out;
}

}  // namespace llmtrain
