// app/trainer_eval.cpp — what the loop runs between steps to see how the model does: the val loss
// (Trainer::Impl::evaluate), HellaSwag (app/eval/hellaswag_eval.hpp) and samples, each at its
// run.*_interval. Collective: the ranks that take part make the same calls in the same order.
#include "app/trainer_impl.hpp"

#include <cstdio>

#include "app/sampler.hpp"

namespace llmtrain {

float Trainer::Impl::evaluate(DataLoader& loader) {
    loader.restore(LoaderState{0, cfg.run.seed, {}});
    const uint64_t n = cfg.run.eval_steps > 0 ? uint64_t(cfg.run.eval_steps) : loader.batches_per_epoch();
    double sum = 0;
    for (uint64_t i = 0; i < n; ++i) {
        int *in = data.inputs.data(), *tgt = data.targets.data();
        loader.next(in, tgt);
        sum += ms.pipe ? ms.pipe->evaluate(in, tgt) : ms.gpt->evaluate(in, tgt);
    }
    return axes->loss_mean(float(sum / double(n)));  // the dp mean (StepAxes: the last stage's, TP index 0's)
}

void Trainer::Impl::eval_and_sample(int64_t s, RunLog& log, Metrics* metrics) {
    const auto& rc = cfg.run;
    const int64_t max_steps = rc.max_steps;
    if (rc.eval_interval > 0 && (s % rc.eval_interval == 0 || s == max_steps)) {
        const float vl = evaluate(*data.val);
        log.val_record(s, vl);
        char buf[64];
        std::snprintf(buf, sizeof buf, "val loss %.4f", vl);
        std::string line = "step " + std::to_string(s) + "/" + std::to_string(max_steps) + " | " + buf;
        if (metrics) metrics->set_val_loss(vl);
        for (size_t k = 0; k < data.source_val.size(); ++k) {  // a mixture's sources with their own val data
            if (!data.source_val[k]) continue;
            const std::string& name = cfg.data.sources[k].name;
            const float v = evaluate(*data.source_val[k]);
            log.eval_record(s, "val:" + name, v);
            std::snprintf(buf, sizeof buf, " %.4f", v);
            line += " | " + name + buf;
            if (metrics) metrics->set_source_val_loss(name, v);
        }
        log.line(line);
    }
    if (hellaswag && (s % rc.eval_hellaswag_interval == 0 || s == max_steps))  // app/eval/hellaswag_eval.hpp
        HellaSwagInLoop::report(s, max_steps, hellaswag->evaluate(*ms.gpt, ms.pipe.get(), last_stage(),
                                                                  topo.tp_index() == 0 && topo.cp_index() == 0, comm),
                                  log, metrics);
    if (rc.sample_interval > 0 && s % rc.sample_interval == 0 && samples_here()) sample(s, log);
}

bool Trainer::Impl::samples_here() const {
    return rank == 0 || topo.cp() > 1 || shape.ep > 1 || (shape.zero_stage == 3 && topo.replica() == 0) ||
           ((ms.pipe || topo.tp() > 1) && topo.replica() == 0 && topo.zero_index() == 0);
}

void Trainer::Impl::sample(int64_t s, RunLog& log) {
    const auto& rc = cfg.run;
    const int eos = data.train->info().eos_id;
    std::vector<int32_t> ids;
    if (ms.pipe) {
        const LogitsAt logits = [&](const int* in, int pos) {
            std::vector<float> l = ms.pipe->logits_at(in, pos);
            l.resize(size_t(shape.model.vocab_size));
            ms.stage_comm->broadcast(l.data(), l.size(), DType::f32, topo.pp() - 1);
            return l;
        };
        ids = generate(logits, B, T, eos, rc.sample_tokens, rc.sample_top_k, rc.sample_temperature, sampler_rng);
    } else {
        ids = generate(*ms.gpt, eos, rc.sample_tokens, rc.sample_top_k, rc.sample_temperature, sampler_rng);
    }
    if (rank == 0) log.line("sample at step " + std::to_string(s) + ": " + tokenizer->decode(ids));
}

}  // namespace llmtrain
