// app/state/model_state.cpp — building one rank's model state, and the dry-run memory estimate (see model_state.hpp).
#include "app/state/model_state.hpp"

#include <algorithm>
#include <cstdio>

#include "app/interop/pretrained.hpp"
#include "app/state/tp_state.hpp"
#include "model/arch.hpp"
#include "model/cuda/flash_attention.hpp"
#include "model/cuda/fp8_linear.hpp"
#include "model/dry_ops.hpp"
#include "parallel/comm.hpp"
#include "parallel/ep_grads.hpp"

namespace llmtrain {

std::vector<int> stage_units(const GPTConfig& g, int stage, int stages, int l0, int l1) {
    if (stages == 1) return {};
    std::vector<int> u;
    // The token table: the embedding on the first stage and, tied, the LM head on the last (an untied
    // head is lm_head.weight in the final unit: the last stage keeps no copy of the table).
    if (stage == 0 || (stage == stages - 1 && ArchSpec(g).tied)) u.push_back(0);
    for (int l = l0; l < l1; ++l) u.push_back(1 + l);
    if (stage == stages - 1) u.push_back(g.n_layer + 1);  // ln_f
    return u;
}

ModelState make_model_state(const Config& cfg, const RunShape& shape, Allocator& alloc, const Topology& topo,
                            const CommFactory& comms, int doc_eos) {
    ModelState s;
    const GPTConfig& g = shape.model;
    const int N = topo.zero_group_size(), P = topo.pp(), st = topo.stage();
    const StageLayers plan = shape.stages[size_t(st)];  // this rank's layers and recomputed layers
    const PipelineSchedule schedule = shape.schedule;
    GPTOptions go;
    go.B = shape.B;
    go.T = shape.T;
    go.l0 = plan.l0;
    go.l1 = plan.l1;
    go.checkpoint_layers = plan.checkpointed;
    go.contexts = P > 1 ? max_in_flight(schedule, st, P, std::max(1, shape.accum)) : 1;
    go.shard_multiple = zero_shard_multiple(N);
    go.doc_eos = doc_eos;
    go.doc_mask = cfg.data.document_mask;
    go.doc_positions = cfg.data.reset_position_ids;
    go.fp8 = shape.fp8;
    // parallel.ep > 1: this rank's experts only, and the engine over the ranks that hold the same
    // experts (parallel/ep_grads.hpp: ZeRO group zero_group_size / ep of them, or 1 at stage 0).
    const int ep = shape.ep;
    const ExpertDp xdp = ep > 1 ? expert_dp_of(topo, ep) : ExpertDp{};
    if (ep > 1) go.shard_multiple = zero_shard_multiple(xdp.zero_size);
    s.layout = std::make_unique<ParamLayout>(g, go.shard_multiple, topo.tp(), topo.tp_index(), ep, xdp.ep_index);
    s.zero_comm = comms(ep > 1 ? xdp.zero_group : topo.zero_group(), false);
    s.replica_comm = comms(ep > 1 ? xdp.replica_group : topo.replica_group(), false);
    if (topo.tp() > 1) {  // asked for after the ZeRO and replica groups, on every rank
        s.tp_group = std::make_unique<TpGroup>(comms(topo.tp_group(), false));
        s.tp_host_comm = comms(topo.tp_group(), true);
        go.tp = s.tp_group.get();
        go.sequence_parallel = shape.sequence_parallel;
    }
    if (topo.cp() > 1) {  // the same group interface as TP's, over the ranks that share a window
        s.cp_group = std::make_unique<TpGroup>(comms(topo.cp_group(), false));
        go.cp = s.cp_group.get();
    }
    if (shape.ep > 1) {  // the ranks that split each MoE layer's experts (model/gpt_moe_ep.cpp)
        s.ep_group = std::make_unique<EpGroup>(comms(topo.ep_group(shape.ep), false));
        go.ep = s.ep_group.get();
    }
    ZeroOptions zo;
    zo.stage = ep > 1 && xdp.zero_size == 1 ? 0 : shape.zero_stage;  // a one-rank expert ZeRO group: nothing to shard
    zo.reduce_dtype = shape.reduce_dtype;
    zo.units = stage_units(g, st, P, go.l0, go.l1);
    s.engine = std::make_unique<ZeroEngine>(alloc, *s.layout, *s.zero_comm, *s.replica_comm, zo);
    if (s.ep_group)  // the dense gradients' sum over the EP group, the norm (asked for on every rank)
        s.ep_grads = std::make_unique<EpGrads>(*s.engine, s.ep_group->comm(), comms(topo.ep_group(ep), true), xdp,
                                               P > 1 && st == P - 1);  // the last stage's wte: the first's
    s.gpt = std::make_unique<GPT>(g, go, alloc, s.engine.get());
    if (P > 1) {
        // Two Comms per neighbour pair (activations, gradients), asked for in pair order everywhere.
        const std::vector<int> pipeline = topo.stage_group();
        PipelineLinks links;
        for (int p = 0; p + 1 < P; ++p) {
            if (st != p && st != p + 1) continue;
            const std::vector<int> pair = {pipeline[size_t(p)], pipeline[size_t(p) + 1]};
            s.links.push_back(comms(pair, false));
            s.links.push_back(comms(pair, false));
            Comm* act = s.links[s.links.size() - 2].get();
            Comm* grad = s.links.back().get();
            if (st == p) links.act_next = act, links.grad_next = grad;
            else links.act_prev = act, links.grad_prev = grad;
        }
        if ((st == 0 || st == P - 1) && ArchSpec(g).tied)  // the tied table's two copies (Megatron's embedding group)
            s.embedding_comm = comms({pipeline.front(), pipeline.back()}, false);
        s.stage_comm = comms(pipeline, true);
        s.pipe = std::make_unique<PipelineStage>(*s.gpt, st, P, schedule, links);
    }
    AdamWConfig ac;
    ac.lr = cfg.optimizer.lr;
    ac.beta1 = cfg.optimizer.beta1;
    ac.beta2 = cfg.optimizer.beta2;
    ac.eps = cfg.optimizer.eps;
    ac.weight_decay = cfg.optimizer.weight_decay;
    const bool master = alloc.ops().act_dtype() != DType::f32;
    s.adam = std::make_unique<AdamW>(alloc, *s.layout, ac, master, s.engine->shard(), shape.offload);
    return s;
}

void init_weights(const Config& cfg, const RunShape& shape, GPT& gpt, AdamW& adam, const void* param_shard) {
    if (shape.init_from.empty()) {
        gpt.init_params(cfg.run.seed);
        adam.init_state(param_shard);
        return;
    }
    const ParamLayout& layout = gpt.layout();
    std::vector<float> host(layout.total_numel());
    if (layout.whole()) {
        load_pretrained(shape.init_from, layout, host.data());
    } else {  // the whole model, then this TP (or EP) rank's part of every tensor
        const ParamLayout full(layout.config());
        std::vector<float> whole(full.total_numel());
        load_pretrained(shape.init_from, full, whole.data());
        layout.cut_local_flat(full, whole.data(), host.data());
    }
    gpt.store().load_params(host.data());  // every rank takes the part it holds
    std::vector<float> w;                  // this rank's optimizer shard of them: the fp32 master weights
    for (const FlatRange& r : adam.ranges())
        w.insert(w.end(), host.begin() + r.offset, host.begin() + r.offset + r.numel);
    const std::vector<float> zeros(w.size(), 0.0f);
    adam.state_from_host(w.data(), zeros.data(), zeros.data());
}

MemBytes estimate_memory(const Config& cfg, const RunShape& shape, int pp_stage) {
    auto ops = make_dry_ops(shape.precision);
    MemBytes out{};
    {
        Allocator alloc(*ops);
        const int rank = shape.topology(0).rank_of(pp_stage, 0, 0, 0);
        const Topology topo = shape.topology(rank);
        const CommFactory dry = [&](const std::vector<int>& ranks, bool) {
            const int me = int(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
            return make_dry_comm(int(ranks.size()), me);
        };
        ModelState s = make_model_state(cfg, shape, alloc, topo, dry, 0);  // any eos: memory only
        for (int k = 0; k < int(MemCategory::count); ++k) out[k] = alloc.current(MemCategory(k));
        out[size_t(MemCategory::host)] += 3 * sizeof(float) * checkpoint_snapshot_elems(shape, topo, *s.engine, *s.adam);
    }
    return out;
}

bool checkpoints_on(const Config& cfg) { return cfg.checkpoint.interval > 0 || cfg.checkpoint.at_end; }

size_t checkpoint_snapshot_elems(const RunShape& shape, const Topology& topo, const ZeroEngine& engine,
                                 const AdamW& adam) {
    if (!shape.checkpoints) return 0;
    const bool last_with_pipe = topo.pp() > 1 && topo.stage() == topo.pp() - 1;
    if (shape.ep > 1) {  // the EP writers (parallel/ep_grads.hpp ExpertDp): one piece of the stage's units each
        const ExpertDp x = expert_dp_of(topo, shape.ep);
        const ParamLayout full(shape.model);
        std::vector<int> held;  // as the trainer's save: the stage's units, the last stage's tied wte copy left out
        for (int u = 0; u < int(full.units().size()); ++u)
            if (engine.holds(u) && !(last_with_pipe && u == 0)) held.push_back(u);
        return x.writer < 0 ? 0 : tp_piece(full, held, x.writers, x.writer).numel;
    }
    if (topo.tp() == 1) return topo.replica() == 0 ? adam.numel() : 0;
    if (topo.replica() != 0) return 0;
    // TrainerCheckpoints::save_whole (app/trainer_checkpoints.hpp): the whole tensors (tp = 1
    // layout, units numbered alike) of the stage's saved units, one piece per rank of replica 0
    // (app/state/tp_state.hpp tp_piece).
    const ParamLayout full(shape.model);
    std::vector<int> held;
    for (int u = 0; u < int(full.units().size()); ++u)
        if (engine.holds(u) && !(last_with_pipe && u == 0)) held.push_back(u);
    const int N = topo.zero_group_size();
    return tp_piece(full, held, N * topo.tp(), topo.tp_index() * N + topo.zero_index()).numel;
}

size_t device_bytes(const MemBytes& b) {
    size_t total = 0;
    for (int k = 0; k < int(MemCategory::count); ++k)
        if (MemCategory(k) != MemCategory::host) total += b[size_t(k)];
    return total;
}

std::string memory_columns_head() {
    std::string head;
    char buf[32];
    for (int k = 0; k < int(MemCategory::count); ++k) {
        std::snprintf(buf, sizeof buf, " %11s", mem_category_name(MemCategory(k)));
        head += buf;
    }
    return head;
}

std::pair<double, double> append_memory_columns(std::string& row, const MemBytes& b) {
    char buf[32];
    for (int k = 0; k < int(MemCategory::count); ++k) {
        std::snprintf(buf, sizeof buf, " %11.1f", double(b[size_t(k)]) / 1048576.0);
        row += buf;
    }
    return {double(device_bytes(b)),
            double(b[int(MemCategory::params)] + b[int(MemCategory::grads)] + b[int(MemCategory::optimizer)])};
}

namespace {

/// memory_report's rows with a pipeline: per ZeRO stage (0, 1: the ones a pipeline allows) and
/// pipeline stage, the per-rank bytes by category, the stage's layers and recomputed layers.
std::vector<std::string> pipeline_report(const Config& cfg, const RunShape& shape, std::vector<std::string> out) {
    char buf[200];
    out.push_back("zero pp_stage layers ckpt in_flight" + memory_columns_head() + " device total | model states");
    const std::vector<StageLayers>& plan = shape.stages;
    const PipelineSchedule schedule = shape.schedule;
    const int P = shape.pp, m = std::max(1, shape.accum);
    for (int zero = 0; zero <= 1; ++zero)
        for (int s = 0; s < P; ++s) {
            const auto b = estimate_memory(cfg, at_zero_stage(shape, zero, shape.zero_group_size), s);
            std::snprintf(buf, sizeof buf, "%4d %8d %6d %4d %9d", zero, s, plan[size_t(s)].l1 - plan[size_t(s)].l0,
                          plan[size_t(s)].checkpointed, max_in_flight(schedule, s, P, m));
            std::string row = buf;
            const auto [total, states] = append_memory_columns(row, b);
            std::snprintf(buf, sizeof buf, " %12.1f | %12.1f", total / 1048576.0, states / 1048576.0);
            out.push_back(row + buf);
        }
    const Topology topo = at_zero_stage(shape, 1, shape.zero_group_size).topology(0);
    out.push_back("groups at stage 1: " + topo.describe() + "; schedule " + shape.schedule_name + ", " +
                  std::to_string(m) + " micro-batches per step (grad_accum_steps)");
    out.push_back("(in_flight: micro-batches whose activations a stage holds at once, each in its own activation "
                  "context; stage 0 also holds the embeddings, the last stage ln_f, the LM head (a tied one is a copy of wte) and the logits. "
                  "ZeRO-2/3 do not combine with a pipeline.)");
    return out;
}

}  // namespace

std::vector<std::string> memory_report(const Config& cfg, const RunShape& shape) {
    std::vector<std::string> out;
    const GPTConfig& g = shape.model;
    const int tp = shape.tp, world = shape.world;
    const double psi = double(ParamLayout(g).num_parameters());
    // What TP rank 0 (and EP rank 0: the dense tensors and E/ep experts) holds.
    const double psi_tp = double(ParamLayout(g, 1, tp, 0, shape.ep, 0).num_parameters());
    const bool bf16 = shape.precision == DType::bf16;
    const double es = bf16 ? 2 : 4, K = bf16 ? 12 : 8;  // optimizer bytes per parameter: master, m, v (fp32: m, v)
    const OffloadConfig& off = shape.offload;
    const double on_device = off.enabled ? 1.0 - off.fraction : 1.0;  // the share of the optimizer state kept there
    const Topology topo = at_zero_stage(shape, 1, shape.zero_group_size).topology(0);  // stages 1-3's groups
    const double N = shape.ep > 1 ? expert_dp_of(topo, shape.ep).zero_size : topo.zero_group_size();
    char buf[640];
    std::snprintf(buf, sizeof buf, "dry run: world %d, %s, %.4g parameters (Psi), micro_batch_size %d x seq_len %d, "
                  "activation_checkpoint.ratio %g, optimizer.offload %s (fraction %g); per rank, MiB:", world,
                  precision_name(shape.precision), psi, shape.B, shape.T,
                  shape.recompute_ratio, cfg.optimizer.offload.c_str(), off.enabled ? off.fraction : 0.0);
    out.push_back(buf);
    if (const int64_t idle = ArchSpec(g).idle_expert_params(); idle > 0) {  // MoE: total and active, exactly
        std::snprintf(buf, sizeof buf, "mixture of experts: %lld parameters, %lld active per token (top_k %d of "
                      "n_experts %d per layer; the experts a token skips: %lld)", (long long)psi,
                      (long long)(int64_t(psi) - idle), g.moe_top_k, g.moe_experts, (long long)idle);
        out.push_back(buf);
    }
    if (const int ep = shape.ep; ep > 1) {  // docs/parallelism.md "Expert parallelism"
        const int64_t experts = int64_t(g.n_layer) * g.moe_experts * 3 * ArchSpec(g).Fe * g.n_embd;  // w13 + w2
        const int64_t rows = int64_t(ep) * shape.B * shape.T * g.moe_top_k;
        std::snprintf(buf, sizeof buf, "expert parallelism: ep %d, each rank runs %d of the %d experts per layer "
                      "(%lld of the %lld routed-expert parameters) and holds only those, its ZeRO group the dp / ep ranks with "
                      "the same experts; receive buffers for "
                      "ep x B*T x top_k = %lld rows per layer (dropless bound)", ep, g.moe_experts / ep, g.moe_experts,
                      (long long)(experts / ep), (long long)experts, (long long)rows);
        out.push_back(buf);
    }
    if (tp > 1) {
        std::snprintf(buf, sizeof buf, "tensor parallel: tp %d, TP rank 0 holds %.4g parameters (Psi_tp: its part of "
                      "every split tensor and the replicated ones whole); the formula below uses Psi_tp", tp, psi_tp);
        out.push_back(buf);
    }
    if (shape.pp > 1) return pipeline_report(cfg, shape, out);
    out.push_back("stage" + memory_columns_head() + " device total | model states   paper formula");
    for (int stage = 0; stage <= 3; ++stage) {
        const auto b = estimate_memory(cfg, at_zero_stage(shape, stage, shape.zero_group_size));
        std::string row = "    " + std::to_string(stage);
        const auto [total, states] = append_memory_columns(row, b);
        // Rajbhandari et al. 2020: DP (es+es+K)Psi; ZeRO-1 es+es+K/N; ZeRO-2 es+(es+K)/N; ZeRO-3
        // (es+es+K)/N; with offload (Ren et al. 2021) the offloaded share of K moves to the host.
        const double n1 = stage == 0 ? 1 : N, Kd = K * on_device;
        const double p = psi_tp;  // = Psi at tp 1
        const double formula = stage == 0   ? (2 * es + Kd) * p
                               : stage == 1 ? (2 * es) * p + Kd * p / n1
                               : stage == 2 ? es * p + (es + Kd) * p / n1
                                            : (2 * es + Kd) * p / n1;
        std::snprintf(buf, sizeof buf, " %11.1f | %9.1f    %9.1f", total / 1048576.0, states / 1048576.0,
                      formula / 1048576.0);
        out.push_back(row + buf);
    }
    out.push_back("groups at stages 1-3: " + topo.describe());
    if (off.enabled)
        out.push_back("host: the offloaded optimizer state, 12 bytes per parameter of the offloaded share of the "
                      "shard (12 Psi/N x fraction; N = 1 at stage 0), plus 4 pinned staging buffers of "
                      "optimizer.offload_chunk_mb / 2 (bf16) or / 1 (fp32) each");
    out.push_back("(model states = params + grads + optimizer, on the device. Differences to the formula: unit padding, and at stages "
                  "1-2 the params and grads categories also hold this rank's shard buffers (the updated params before "
                  "the all-gather, the reduced gradient). comm holds the ZeRO working buffers and, when "
                  "grad_reduce_dtype differs from the precision, the cast buffers. The CUDA backend adds its own "
                  "workspaces: 32 MiB for cuBLASLt and the attention path's, cudnn's backward B*n_head*T^2*2 bytes "
                  "(GPT-2 124M at micro-batch 32: 768 MiB), cublas up to model.attention_workspace_mb plus per-head "
                  "copies, and with n_kv_head < n_head on attention.cu (on cudnn only if it refuses its grouped-query "
                  "graph) the expanded heads, 6 B*T*n_embd act elements; docs/attention.md.)");
    if (bf16 && cuda::flash_attention_supported(g.n_embd, g.n_head)) {
        const int heads = g.n_head / tp, hs = g.n_embd / g.n_head;
        // No device here: the larger of the backward's key-block variants' scratch (an upper bound).
        const size_t bytes = cuda::flash_attention_backward_scratch_bytes(shape.B, shape.T, heads * hs,
                                                                          heads);
        std::snprintf(buf, sizeof buf, "(CUDA, model.attention = \"native\" or \"auto\" without cuDNN: "
                      "FlashAttention-2's backward scratch, D and the dQ partials of every key block (128 keys; at head size 128 "
                      "64 where a device allows under 115,200 B of shared memory per block: the larger of the two counted) for "
                      "as many batch rows as fit %.0f MiB (kFlashDqWorkspaceCap), or where one row does not, row chunks within it "
                      "(dK/dV carry and one query chunk's partials), is %.1f MiB per rank, counted as workspace.)",
                      cuda::kFlashDqWorkspaceCap / 1048576.0, bytes / 1048576.0);
        out.push_back(buf);
    }
    if (shape.fp8 != Fp8Recipe::off) out.push_back(fp8_workspace_line(shape));
    return out;
}

std::string fp8_workspace_line(const RunShape& shape) {
    const ArchSpec spec(shape.model);
    const int tp = shape.tp, C = shape.model.n_embd;
    const int N = shape.B * shape.T / shape.cp;  // this rank's rows
    // The block's four linear layers (in -> out widths on one TP rank); the largest call sizes it.
    const int widths[4][2] = {{C, spec.qkv_width(tp)}, {spec.NH / tp * spec.HS, C}, {C, spec.mlp_in_width(tp)},
                              {spec.F / tp, C}};
    size_t bytes = 0, copies = 0, scales = 0;
    for (const auto& w : widths) {
        const cuda::Fp8Workspace ws = cuda::fp8_linear_workspace(N, w[0], w[1]);
        if (ws.bytes > bytes) bytes = ws.bytes, copies = ws.scales[0], scales = ws.bytes - ws.scales[0];
    }
    char buf[400];
    std::snprintf(buf, sizeof buf, "(CUDA, training.fp8 = \"%s\": one linear layer call's FP8 copies (4 x %.1f MiB: "
                  "the backward's dout, weight^T, dout^T, inp^T) and scales (%.1f KiB), %.1f MiB per rank, counted as "
                  "workspace; docs/fp8.md.)", fp8_recipe_name(shape.fp8), double(copies) / 4 / 1048576.0,
                  double(scales) / 1024.0, double(bytes) / 1048576.0);
    return buf;
}

}  // namespace llmtrain
