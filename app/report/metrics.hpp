// app/report/metrics.hpp — Prometheus metrics (prometheus-cpp registry, served over HTTP), docs/metrics.md.
//
// Names llmtrain_*, base units (_seconds, _bytes, _total), labels run and rank. The endpoint binds
// metrics.listen (default 127.0.0.1:9400 + local rank; port 0 picks a free port). A bare port is
// refused: it would bind every interface.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace llmtrain {

/// Bad listen address or port in use; what() names the address.
struct MetricsError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Metrics {
public:
    /// Starts the exposer on `listen` ("host:port"), with `port_offset` added to a non-zero port.
    /// Errors: MetricsError for a malformed address or a port that cannot be bound.
    Metrics(const std::string& listen, int port_offset, const std::string& run, int rank);
    ~Metrics();
    int port() const;  ///< the bound port (useful with port 0)

    /// Holds scrapes off while it lives: the values one step sets under it (llmtrain_step,
    /// llmtrain_tokens_total, ...) reach a scrape together, never half of them (a scrape between
    /// set_step and add_tokens once read step 806 with 805 steps' tokens).
    [[nodiscard]] std::unique_lock<std::mutex> hold_scrapes();

    void set_step(int64_t step);
    void set_loss(double loss);
    void set_val_loss(double loss);
    void set_learning_rate(double lr);
    void set_grad_norm(double norm);
    void add_tokens(double tokens);              ///< llmtrain_tokens_total
    void set_tokens_per_second(double v);
    void set_mfu(double ratio);                  ///< llmtrain_mfu_ratio, 0..1
    void observe_step_seconds(double s);         ///< histogram llmtrain_step_seconds
    void set_memory_bytes(const std::string& category, double bytes);  ///< label category
    /// llmtrain_checkpoint_seconds (the last checkpoint from its snapshot to its commit, background
    /// writes included) + llmtrain_checkpoints_total.
    void observe_checkpoint_seconds(double s);
    /// llmtrain_checkpoint_blocked_seconds (the training thread's time in the last checkpoint) and
    /// llmtrain_checkpoint_write_seconds (its slowest rank's part write: files, fsync, SHA-256).
    void set_checkpoint_phase_seconds(double blocked, double write);
    void add_skipped_step();                     ///< llmtrain_skipped_steps_total (non-finite loss or norm)
    /// llmtrain_restarts_total += n: at start, the times this run was started again from its own
    /// checkpoints (state.toml's restarts + 1 at a resume, 0 from scratch; docs/multinode.md "Carrying on").
    void add_restarts(int64_t n);
    /// llmtrain_offload_seconds{phase}: the last step's time in phase "d2h", "host_adam", "h2d" or
    /// "wall" of the offloaded optimizer (docs/parallelism.md "Optimizer offload").
    void set_offload_seconds(const std::string& phase, double seconds);
    /// llmtrain_attention_info{path}: 1 for the attention path in use ("native", "cublas", "cudnn";
    /// Ops::attention_name), 0 for a path used before (model.attention = "auto" may fall back).
    void set_attention(const std::string& path);
    /// llmtrain_eval_hellaswag_accuracy{norm}: the last HellaSwag evaluation's accuracy, 0..1; norm
    /// "none" (acc: the lowest summed loss) or "tokens" (acc_norm: the lowest mean loss per token).
    void set_hellaswag_accuracy(const std::string& norm, double accuracy);
    /// llmtrain_source_tokens_total{source}: training tokens drawn from a mixture's source (data.sources).
    void add_source_tokens(const std::string& source, double tokens);
    /// llmtrain_source_val_loss{source}: the last val loss on a source's own val data (data.sources val).
    void set_source_val_loss(const std::string& source, double loss);

    /// llmtrain_moe_aux_loss: the last step's load-balancing loss (model.moe; alpha * E * sum_e f_e P_e
    /// summed over the layers, the mean over micro-batches and dp ranks), apart from llmtrain_loss.
    void set_moe_aux_loss(double loss);
    /// llmtrain_moe_expert_load{layer,expert}: the (token, slot) pairs routed to an expert of a layer
    /// in the last step, summed over the dp ranks (a layer's sum is B*T*accum*dp*top_k).
    void set_moe_expert_load(int layer, int expert, double tokens);
    /// llmtrain_moe_load_imbalance{layer}: the last step's max over experts of the load / the mean
    /// load (1 = perfectly balanced, E = every pair on one expert).
    void set_moe_load_imbalance(int layer, double ratio);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
