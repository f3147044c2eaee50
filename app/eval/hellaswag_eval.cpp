// app/eval/hellaswag_eval.cpp — HellaSwag during training (see hellaswag_eval.hpp).
#include "app/eval/hellaswag_eval.hpp"

#include <cstdio>

#include "app/report/run_log.hpp"
#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"

namespace llmtrain {

HellaSwagInLoop::HellaSwagInLoop(const Config& cfg, int B, int T, int vocab_size, int dp_index, int dp) : B_(B), T_(T), dp_(dp) {
    const bool ours = cfg.data.hellaswag.empty();
    const std::string path = ours ? hellaswag_default_path() : cfg.data.hellaswag;
    const std::vector<HellaSwagItem> items =
        read_hellaswag(path, ours ? kHellaSwagValSha256 : "", size_t(cfg.run.eval_hellaswag_items));
    TokenDataset ds(cfg.data.train);
    const Tokenizer tok = Tokenizer::from_dataset(ds);
    if (tok.vocab_size() > vocab_size)
        throw ConfigError("run.eval_hellaswag_interval: the tokenizer of " + cfg.data.train + " has " +
                          std::to_string(tok.vocab_size()) + " ids, more than model.vocab_size " +
                          std::to_string(vocab_size));
    total_ = items.size();
    for (size_t i = 0; i < items.size(); ++i) {
        HellaSwagRows r = encode_hellaswag(items[i], tok, T_, i, path);  // every item on every rank: see the header
        if (int(i % size_t(dp)) == dp_index) mine_.push_back(std::move(r));
    }
}

HellaSwagCounts HellaSwagInLoop::evaluate(const RowForward& forward, Comm& comm, bool report) {
    // Every rank runs as many forwards as the rank with the most items needs (ZeRO-3's gathers and
    // the pipeline's sends pair up across ranks).
    const size_t most = (total_ + size_t(dp_) - 1) / size_t(dp_);
    const std::vector<HellaSwagChoice> choices = score_hellaswag(mine_, B_, T_, hellaswag_forwards(most, B_), forward);
    const HellaSwagCounts c = count_hellaswag(choices);
    float v[3] = {0, 0, 0};
    if (report && !choices.empty()) {
        v[0] = float(c.items);
        v[1] = float(c.correct);
        v[2] = float(c.correct_norm);
    } else if (report && !mine_.empty()) {
        throw std::logic_error("HellaSwagInLoop::evaluate: a reporting rank holds no losses");
    }
    if (comm.size() > 1) comm.all_reduce_sum(v, 3, DType::f32);
    HellaSwagCounts sum;
    sum.items = v[0];
    sum.correct = v[1];
    sum.correct_norm = v[2];
    return sum;
}

HellaSwagCounts HellaSwagInLoop::evaluate(GPT& gpt, PipelineStage* pipe, bool last_stage, bool tp_index0,
                                          Comm& comm) {
    const bool holds = pipe == nullptr || last_stage;
    const RowForward forward = [&](const int32_t* in, const int32_t* tgt, float* losses) {
        if (pipe) pipe->evaluate(in, tgt);
        else gpt.evaluate(in, tgt);
        if (!holds) return false;
        gpt.window_losses(losses);  // with cp gathered from the group, in window order
        return true;
    };
    return evaluate(forward, comm, holds && tp_index0);
}

std::string HellaSwagInLoop::log_line(int64_t step, int64_t max_steps, const HellaSwagCounts& c) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "step %lld/%lld | hellaswag acc %.4f acc_norm %.4f (%s items)", (long long)step,
                  (long long)max_steps, c.acc(), c.acc_norm(), format_thousands(c.items).c_str());
    return buf;
}

void HellaSwagInLoop::report(int64_t step, int64_t max_steps, const HellaSwagCounts& c, RunLog& log,
                             Metrics* metrics) {
    log.eval_record(step, "hellaswag", c.acc());
    log.eval_record(step, "hellaswag_norm", c.acc_norm());
    log.line(log_line(step, max_steps, c));
    if (metrics) {
        metrics->set_hellaswag_accuracy("none", c.acc());
        metrics->set_hellaswag_accuracy("tokens", c.acc_norm());
    }
}

}  // namespace llmtrain
