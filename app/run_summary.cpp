// app/run_summary.cpp — Trainer::summary(): the start-up lines (model, batch, memory by category,
// parallel layout, schedule) that the log and --dry-run print, out of the loop in app/trainer.cpp.
#include "app/trainer_impl.hpp"

namespace llmtrain {

namespace {

using trainer_detail::shape_of;

std::string mib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
    return buf;
}

/// The start-up summary's model: "GPT-2 <shape>", or "Llama <shape> n_kv_head=K intermediate_size=F"
/// (with model.moe "experts=ExFe top_k=k [shared_experts=S] router=R" instead of the MLP width),
/// "head_dim=D" (other than n_embd / n_head) and "qk_norm" with Qwen3's attention keys, and "untied"
/// when its head is (model/arch.hpp).
std::string arch_shape_of(const GPTConfig& m) {
    if (m.arch == Arch::gpt2) return "GPT-2 " + shape_of(m);
    const ArchSpec s(m);
    const std::string mlp =
        s.moe() ? " experts=" + std::to_string(s.E) + "x" + std::to_string(s.Fe) + " top_k=" + std::to_string(s.K) +
                      (m.moe_shared_experts > 0 ? " shared_experts=" + std::to_string(m.moe_shared_experts) : "") +
                      " router=" + (m.moe_sigmoid ? "sigmoid" : "softmax")
                : " intermediate_size=" + std::to_string(s.F);
    const std::string qwen3 = (int64_t(s.NH) * s.HS != s.C ? " head_dim=" + std::to_string(s.HS) : std::string()) +
                              (s.qk_norm ? " qk_norm" : "");
    return "Llama " + shape_of(m) + " n_kv_head=" + std::to_string(s.NKV) + qwen3 + mlp + (s.tied ? "" : " untied");
}

}  // namespace

std::vector<std::string> Trainer::summary() const {
    const Impl& I = *impl_;
    const auto& c = I.cfg;
    std::vector<std::string> out;
    out.push_back("llmtrain: run '" + c.run.name + "' in " + c.run.run_dir);
    out.push_back("backend: " + std::string(I.ops->name()) + ", precision " + precision_name(I.shape.precision) + ", world " +
                  std::to_string(world_size()) + ", dp " + std::to_string(I.topo.data_parallel()) + ", tp " +
                  std::to_string(I.topo.tp()) + (I.topo.cp() > 1 ? ", cp " + std::to_string(I.topo.cp()) : std::string()) +
                  (I.shape.ep > 1 ? ", ep " + std::to_string(I.shape.ep) : std::string()));
    out.push_back("attention: " + std::string(I.ops->attention_name()) + " (" + I.ops->attention_reason() + ")");
    if (c.data.document_mask || c.data.reset_position_ids)  // docs/attention.md "Document masking"
        out.push_back(std::string("documents: ") +
                      (c.data.document_mask ? "attention masked to each document" : "attention across documents") +
                      (c.data.reset_position_ids ? ", positions restart at each document" : ", positions run on") +
                      " (a document ends at eos id " + std::to_string(I.data.train->info().eos_id) + ")");
    out.push_back("parallel: zero_stage " + std::to_string(I.shape.zero_stage) + ", grad_reduce_dtype " +
                  precision_name(I.shape.reduce_dtype) + " | " + I.topo.describe());
    const int64_t idle = ArchSpec(I.shape.model).idle_expert_params();  // MoE: experts a token skips
    out.push_back("model: " + arch_shape_of(I.shape.model) + " | " + format_thousands(double(I.nparams())) +
                  " parameters" +
                  (idle > 0 ? " (" + format_thousands(double(int64_t(I.nparams()) - idle)) + " active per token)"
                            : std::string()) +
                  (I.topo.tp() > 1 ? ", " + format_thousands(double(I.ms.layout->num_parameters())) + " on this TP rank"
                                   : std::string()));
    char fpt[64];
    std::snprintf(fpt, sizeof fpt, "%.3g", flops_per_token(I.shape.model, I.nparams(), I.T));
    out.push_back("batch: micro_batch_size " + std::to_string(I.B) + " x grad_accum_steps " + std::to_string(I.accum) +
                  " x dp " + std::to_string(I.topo.data_parallel()) + " = global_batch_size " +
                  std::to_string(I.shape.global_batch) + " sequences = " +
                  format_thousands(double(I.tokens_per_step())) + " tokens per step | " + fpt +
                  " training FLOPs per token");
    std::string mem = "memory (this rank):";
    for (int k = 0; k < int(MemCategory::count); ++k) {
        auto cat = MemCategory(k);
        mem += std::string(" ") + mem_category_name(cat) + " " + mib(I.alloc->current(cat)) + ",";
    }
    out.push_back(mem + " device total " + mib(I.alloc->current_total()));
    if (I.ms.pipe) {
        const int P = I.topo.pp(), m = I.accum;
        const PipelineSchedule sch = I.shape.schedule;
        out.push_back("pipeline: pp " + std::to_string(P) + ", schedule " + I.shape.schedule_name + ", " +
                      std::to_string(m) + " micro-batches per step; per stage (memory of its first rank, counted "
                      "as in --dry-run):");
        for (int s = 0; s < P; ++s) {
            const StageLayers& sl = I.shape.stages[size_t(s)];
            const auto b = estimate_memory(c, I.shape, s);
            std::string line = "  stage " + std::to_string(s) + ": layers [" + std::to_string(sl.l0) + ", " +
                               std::to_string(sl.l1) + "), " + std::to_string(sl.checkpointed) + " recomputed, " +
                               std::to_string(max_in_flight(sch, s, P, m)) + " micro-batches in flight |";
            for (int k = 0; k < int(MemCategory::count); ++k)
                line += std::string(" ") + mem_category_name(MemCategory(k)) + " " + mib(b[k]);
            out.push_back(line + ", device total " + mib(device_bytes(b)));
        }
    }
    if (const HostOffload* off = I.ms.adam->offload()) {
        char buf[240];
        std::snprintf(buf, sizeof buf, "optimizer: offload cpu, %s of %s shard elements on the host (fraction %g), "
                      "%d chunks of %s parameters, double-buffered", format_thousands(double(off->numel())).c_str(),
                      format_thousands(double(I.ms.adam->numel())).c_str(), c.optimizer.offload_fraction, off->chunks(),
                      format_thousands(double(off->chunk_elems())).c_str());
        out.push_back(buf);
    }
    auto data_line = [](const char* what, const DataLoader& l) {
        const auto& i = l.info();
        return std::string("data: ") + what + " " + i.path + ": " + format_thousands(double(i.n_tokens)) +
               " tokens, " + format_thousands(double(i.n_docs)) + " documents, vocab " +
               std::to_string(i.vocab_size) + ", " + std::to_string(l.batches_per_epoch()) +
               " micro-batches per epoch per rank";
    };
    out.push_back(data_line("train", *I.data.train));
    out.push_back(I.data.val ? data_line("val", *I.data.val) : "data: val " + c.data.val + ": not read (run.eval_interval = 0)");
    char sched[200];
    std::snprintf(sched, sizeof sched, "schedule: max_steps %d, lr %.3g -> %.3g (%s), warmup_steps %d, grad_clip %g",
                  c.run.max_steps, c.optimizer.lr, c.lr_schedule.min_lr, c.lr_schedule.decay.c_str(),
                  c.lr_schedule.warmup_steps, I.shape.grad_clip);
    out.push_back(sched);
    const CheckpointConfig& ck = c.checkpoint;
    if (!checkpoints_on(c)) {
        out.push_back("checkpoints: off (checkpoint.interval = 0, checkpoint.at_end = false): none written, no host "
                      "snapshot");
    } else {
        std::string when = ck.interval > 0 ? "every " + std::to_string(ck.interval) + " steps" : std::string();
        if (ck.at_end) when += std::string(when.empty() ? "" : ", ") + "at the end and on SIGTERM/SIGINT";
        out.push_back("checkpoints: " + when + "; host snapshot " + mib(3 * sizeof(float) * I.checkpoints->reserved()) +
                      " (pinned) on this rank");
    }
    return out;
}

}  // namespace llmtrain
