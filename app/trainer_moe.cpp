// app/trainer_moe.cpp — the trainer's part of a mixture of experts (model.moe; docs/model.md "Mixture
// of experts"): each step's balance loss and expert loads, all-reduced over the dp ranks (with cp
// each rank's loads are its rows' and its balance loss the window's; with tp TP index 0 alone
// counts), into the log, losses.tsv and the metrics (app/moe_balance.hpp).
#include <algorithm>

#include "app/trainer_impl.hpp"

namespace llmtrain {

void Trainer::Impl::moe_after_step() {
    const GPTConfig& m = shape.model;
    if (m.moe_experts == 0 || !ms.gpt) return;
    if (!moe) moe.emplace(m.n_layer, m.moe_experts);
    std::vector<int64_t> load;
    ms.gpt->take_moe_load(load);
    float aux = float(ms.gpt->take_moe_aux_sum() / accum);
    if (topo.tp_index() != 0) {  // the TP ranks route the same rows alike (gpt_moe.cpp): count TP index 0's
        std::fill(load.begin(), load.end(), int64_t(0));
        aux = 0.0f;
    }
    if (topo.world_size() > 1) {  // one all-reduce: the loads (fp32 sums of integers, exact below 2^24 each), then aux
        std::vector<float> f(load.begin(), load.end());
        f.push_back(aux);
        comm.all_reduce_sum(f.data(), f.size(), DType::f32);
        for (size_t i = 0; i < load.size(); ++i) load[i] = int64_t(f[i]);
        aux = f.back() / float(dp);  // the dp mean of the sum over the pipeline's stages (each its layers')
    }
    moe->add_step(aux, load);
    if (shape.moe_bias_update_rate > 0.0f) {  // DeepSeek-V3's auxiliary-loss-free balancing
        moe->update_bias(shape.moe_bias_update_rate);
        ms.gpt->set_moe_bias(moe->bias.data());
    }
}

void Trainer::Impl::restore_moe_bias(const TrainState& st, const std::string& dir) {
    const GPTConfig& m = shape.model;
    if (m.moe_experts == 0 || shape.moe_bias_update_rate <= 0.0f || st.moe_bias.empty()) return;
    if (st.moe_experts != m.moe_experts || st.moe_bias.size() != size_t(m.n_layer) * size_t(m.moe_experts))
        throw CheckpointError(dir + "/state.toml: moe.bias: " + std::to_string(st.moe_bias.size()) +
                              " biases in rows of " + std::to_string(st.moe_experts) + ", the model has " +
                              std::to_string(m.n_layer) + " layers of " + std::to_string(m.moe_experts) + " experts");
    if (!moe) moe.emplace(m.n_layer, m.moe_experts);
    moe->bias = st.moe_bias;
    ms.gpt->set_moe_bias(moe->bias.data());
}

void Trainer::Impl::report_moe(int64_t s, bool log_line, RunLog& log, Metrics* metrics) {
    if (!moe) return;
    log.eval_record(s, "moe_aux", moe->aux);
    if (metrics) {
        auto one_step = metrics->hold_scrapes();
        metrics->set_moe_aux_loss(moe->aux);
        for (int l = 0; l < moe->n_layer; ++l) {
            const int64_t* row = moe->step_load.data() + size_t(l) * size_t(moe->E);
            for (int e = 0; e < moe->E; ++e) metrics->set_moe_expert_load(l, e, double(row[e]));
            metrics->set_moe_load_imbalance(l, load_imbalance(row, moe->E));
        }
    }
    if (!log_line) return;
    for (int l = 0; l < moe->n_layer; ++l)
        log.eval_record(s, "moe_imbalance:" + std::to_string(l), moe->window_imbalance(l));
    log.line(moe->take_window_line(s, cfg.run.max_steps));
}

}  // namespace llmtrain
