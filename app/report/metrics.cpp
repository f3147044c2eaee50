// app/report/metrics.cpp — the llmtrain_* metrics (prometheus-cpp 1.0.1 core) and their /metrics endpoint.
//
// One prometheus::Registry, serialized in the Prometheus text format by prometheus::TextSerializer
// and served at http://<listen>/metrics by MetricsServer (not prometheus::Exposer: see
// metrics_server.hpp). Every family carries the constant labels run and rank;
// llmtrain_memory_bytes adds `category`, llmtrain_offload_seconds `phase`. Setters are cheap and thread-safe (prometheus-cpp metrics
// are atomics; Family::Add and Registry::Collect take locks).
#include "app/report/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "app/config/listen.hpp"
#include "app/report/metrics_server.hpp"

namespace llmtrain {

struct Metrics::Impl {
    std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
    std::mutex scrape_mutex;  // a scrape's Collect vs. a step's updates (hold_scrapes); outlives server
    std::unique_ptr<MetricsServer> server;
    prometheus::Labels labels;  // {run, rank}
    prometheus::Gauge *step, *loss, *val_loss, *learning_rate, *grad_norm, *tokens_per_second, *mfu, *checkpoint_seconds,
        *checkpoint_blocked_seconds, *checkpoint_write_seconds;
    prometheus::Counter *tokens_total, *checkpoints_total, *skipped_steps_total, *restarts_total;
    prometheus::Histogram* step_seconds;
    prometheus::Family<prometheus::Gauge>* memory;
    prometheus::Family<prometheus::Gauge>* offload;
    prometheus::Family<prometheus::Gauge>* attention;
    prometheus::Family<prometheus::Gauge>* hellaswag;
    prometheus::Family<prometheus::Counter>* source_tokens;  // label source: a mixture's
    prometheus::Family<prometheus::Gauge>* source_val_loss;
    prometheus::Gauge* moe_aux_loss = nullptr;  // model.moe only: registered on first use
    prometheus::Family<prometheus::Gauge>* moe_expert_load = nullptr;
    prometheus::Family<prometheus::Gauge>* moe_imbalance = nullptr;
    prometheus::Family<prometheus::Gauge>* family(const std::string& name, const std::string& help) {
        return &prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(*registry);
    }
    prometheus::Gauge* attention_now = nullptr;  // the series set to 1

    prometheus::Gauge* gauge(const std::string& name, const std::string& help) {
        return &prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(*registry).Add({});
    }
    prometheus::Counter* counter(const std::string& name, const std::string& help) {
        return &prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(*registry).Add({});
    }
};

Metrics::Metrics(const std::string& listen, int port_offset, const std::string& run, int rank)
    : impl_(std::make_unique<Impl>()) {
    ListenAddress addr;
    try {
        addr = parse_listen(listen);
    } catch (const std::invalid_argument& e) {
        throw MetricsError(e.what());
    }
    if (addr.port != 0) addr.port += port_offset;
    if (addr.port > 65535)
        throw MetricsError("metrics.listen \"" + listen + "\" + local rank " + std::to_string(port_offset) +
                           " gives port " + std::to_string(addr.port) + " > 65535");

    auto& m = *impl_;
    m.labels = {{"run", run}, {"rank", std::to_string(rank)}};
    m.step = m.gauge("llmtrain_step", "Optimizer steps completed.");
    m.loss = m.gauge("llmtrain_loss", "Training loss of the last step (mean cross-entropy, nats per token).");
    m.val_loss = m.gauge("llmtrain_val_loss", "Validation loss of the last evaluation (nats per token).");
    m.learning_rate = m.gauge("llmtrain_learning_rate", "Learning rate of the last step.");
    m.grad_norm = m.gauge("llmtrain_grad_norm", "Global L2 norm of the gradients of the last step, before clipping.");
    m.tokens_per_second = m.gauge("llmtrain_tokens_per_second", "Training throughput of the last step, tokens/s.");
    m.mfu = m.gauge("llmtrain_mfu_ratio", "Model FLOPs utilization of the last step, 0..1.");
    m.checkpoint_seconds = m.gauge("llmtrain_checkpoint_seconds",
                                   "Wall time of the last checkpoint from its snapshot to its commit, seconds.");
    m.checkpoint_blocked_seconds = m.gauge("llmtrain_checkpoint_blocked_seconds",
                                           "Time the last checkpoint held up the training thread, seconds.");
    m.checkpoint_write_seconds = m.gauge("llmtrain_checkpoint_write_seconds",
                                         "Slowest rank's write of its part of the last checkpoint, seconds.");
    m.tokens_total = m.counter("llmtrain_tokens_total", "Training tokens processed.");
    m.checkpoints_total = m.counter("llmtrain_checkpoints_total", "Checkpoints written.");
    m.skipped_steps_total =
        m.counter("llmtrain_skipped_steps_total", "Steps skipped without an update: loss or gradient norm not finite.");
    m.restarts_total = m.counter("llmtrain_restarts_total", "Times this run was started again from its own checkpoints.");
    // Step time: 1 ms .. 100 s in a 1-2.5-5 progression.
    m.step_seconds = &prometheus::BuildHistogram()
                          .Name("llmtrain_step_seconds")
                          .Help("Wall time of one optimizer step, seconds.")
                          .Labels(m.labels)
                          .Register(*m.registry)
                          .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                           0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50,
                                                                           100});
    m.memory = &prometheus::BuildGauge()
                    .Name("llmtrain_memory_bytes")
                    .Help("Bytes allocated by category (params, grads, optimizer, activations, workspace, ...).")
                    .Labels(m.labels)
                    .Register(*m.registry);

    m.offload = &prometheus::BuildGauge()
                     .Name("llmtrain_offload_seconds")
                     .Help("Offloaded optimizer, last step: seconds per phase (d2h, host_adam, h2d copies' and "
                           "host AdamW's own time; wall: the whole host step).")
                     .Labels(m.labels)
                     .Register(*m.registry);

    m.attention = &prometheus::BuildGauge()
                       .Name("llmtrain_attention_info")
                       .Help("1 for the attention path in use (label path: native, cublas or cudnn).")
                       .Labels(m.labels)
                       .Register(*m.registry);

    m.hellaswag = &prometheus::BuildGauge()
                       .Name("llmtrain_eval_hellaswag_accuracy")
                       .Help("HellaSwag accuracy of the last evaluation, 0..1 (label norm: none = lowest summed loss, "
                             "tokens = lowest mean loss per ending token).")
                       .Labels(m.labels)
                       .Register(*m.registry);

    m.source_tokens = &prometheus::BuildCounter()
                           .Name("llmtrain_source_tokens_total")
                           .Help("Training tokens drawn from each source of the data mixture (label source: its name).")
                           .Labels(m.labels)
                           .Register(*m.registry);
    m.source_val_loss = &prometheus::BuildGauge()
                             .Name("llmtrain_source_val_loss")
                             .Help("Validation loss of the last evaluation on each source's own val data (label "
                                   "source), nats per token.")
                             .Labels(m.labels)
                             .Register(*m.registry);

    m.server = std::make_unique<MetricsServer>(addr, [&m] {
        std::vector<prometheus::MetricFamily> families;
        {
            std::lock_guard<std::mutex> hold(m.scrape_mutex);
            families = m.registry->Collect();
        }
        return prometheus::TextSerializer().Serialize(families);
    });
}

Metrics::~Metrics() = default;

int Metrics::port() const { return impl_->server->port(); }

std::unique_lock<std::mutex> Metrics::hold_scrapes() { return std::unique_lock<std::mutex>(impl_->scrape_mutex); }

void Metrics::set_step(int64_t step) { impl_->step->Set(static_cast<double>(step)); }
void Metrics::set_loss(double loss) { impl_->loss->Set(loss); }
void Metrics::set_val_loss(double loss) { impl_->val_loss->Set(loss); }
void Metrics::set_learning_rate(double lr) { impl_->learning_rate->Set(lr); }
void Metrics::set_grad_norm(double norm) { impl_->grad_norm->Set(norm); }
void Metrics::add_tokens(double tokens) { impl_->tokens_total->Increment(tokens); }
void Metrics::set_tokens_per_second(double v) { impl_->tokens_per_second->Set(v); }
void Metrics::set_mfu(double ratio) { impl_->mfu->Set(ratio); }
void Metrics::observe_step_seconds(double s) { impl_->step_seconds->Observe(s); }
void Metrics::set_memory_bytes(const std::string& category, double bytes) {
    impl_->memory->Add({{"category", category}}).Set(bytes);
}
void Metrics::add_skipped_step() { impl_->skipped_steps_total->Increment(); }
void Metrics::add_restarts(int64_t n) { impl_->restarts_total->Increment(double(n)); }
void Metrics::set_offload_seconds(const std::string& phase, double seconds) {
    impl_->offload->Add({{"phase", phase}}).Set(seconds);
}

void Metrics::set_attention(const std::string& path) {
    prometheus::Gauge& g = impl_->attention->Add({{"path", path}});
    if (impl_->attention_now != nullptr && impl_->attention_now != &g) impl_->attention_now->Set(0);
    g.Set(1);
    impl_->attention_now = &g;
}

void Metrics::set_hellaswag_accuracy(const std::string& norm, double accuracy) {
    impl_->hellaswag->Add({{"norm", norm}}).Set(accuracy);
}

void Metrics::add_source_tokens(const std::string& source, double tokens) {
    impl_->source_tokens->Add({{"source", source}}).Increment(tokens);
}

void Metrics::set_source_val_loss(const std::string& source, double loss) {
    impl_->source_val_loss->Add({{"source", source}}).Set(loss);
}

// The MoE families are registered at their first use, so a dense run's /metrics does not list them.
void Metrics::set_moe_aux_loss(double loss) {
    if (!impl_->moe_aux_loss)
        impl_->moe_aux_loss = impl_->gauge("llmtrain_moe_aux_loss",
                                           "Mixture of experts: load-balancing loss of the last step (sum over "
                                           "layers), the part of the objective beside the cross-entropy.");
    impl_->moe_aux_loss->Set(loss);
}

void Metrics::set_moe_expert_load(int layer, int expert, double tokens) {
    if (!impl_->moe_expert_load)
        impl_->moe_expert_load = impl_->family("llmtrain_moe_expert_load",
                                               "Mixture of experts: (token, slot) pairs routed to each expert of "
                                               "each layer in the last step, all dp ranks (labels layer, expert).");
    impl_->moe_expert_load->Add({{"layer", std::to_string(layer)}, {"expert", std::to_string(expert)}}).Set(tokens);
}

void Metrics::set_moe_load_imbalance(int layer, double ratio) {
    if (!impl_->moe_imbalance)
        impl_->moe_imbalance = impl_->family("llmtrain_moe_load_imbalance",
                                             "Mixture of experts: the last step's largest expert load over the mean "
                                             "load, per layer (1 = balanced).");
    impl_->moe_imbalance->Add({{"layer", std::to_string(layer)}}).Set(ratio);
}

void Metrics::observe_checkpoint_seconds(double s) {
    impl_->checkpoint_seconds->Set(s);
    impl_->checkpoints_total->Increment();
}

void Metrics::set_checkpoint_phase_seconds(double blocked, double write) {
    impl_->checkpoint_blocked_seconds->Set(blocked);
    impl_->checkpoint_write_seconds->Set(write);
}

}  // namespace llmtrain
