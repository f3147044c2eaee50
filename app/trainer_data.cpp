// app/trainer_data.cpp — opening what a training run reads (see trainer_data.hpp).
#include "app/trainer_data.hpp"

namespace llmtrain {

TrainerData open_trainer_data(const Config& cfg, const RunShape& shape, const Topology& topo) {
    TrainerData d;
    LoaderOptions lo;
    lo.path = cfg.data.train;
    lo.B = shape.B;
    lo.T = shape.T;
    // Data is sharded by the data index: a TP group and a CP group read the same batches (each CP rank
    // then keeps its chunks of every window, model/context_parallel.hpp).
    lo.rank = topo.data_index();
    lo.world = topo.data_parallel();
    lo.seed = cfg.run.seed;
    lo.shuffle = true;
    lo.vocab_size = shape.model.vocab_size;
    for (const DataSource& s : cfg.data.sources) lo.sources.push_back(SourceSpec{s.name, s.path, s.weight});
    d.train = std::make_unique<DataLoader>(lo);
    lo.sources.clear();
    if (cfg.run.eval_interval > 0) {  // else never read: a val set too small for B x dp is no error
        lo.path = cfg.data.val;
        lo.shuffle = false;
        lo.expect_tokenizer_sha256 = d.train->info().tokenizer_sha256;  // val must be tokenized alike
        d.val = std::make_unique<DataLoader>(lo);
        for (const DataSource& s : cfg.data.sources) {  // per-source val losses (docs/data.md "Sources")
            lo.path = s.val;
            d.source_val.push_back(s.val.empty() ? nullptr : std::make_unique<DataLoader>(lo));
        }
    }
    d.inputs.resize(size_t(shape.B) * shape.T);
    d.targets.resize(size_t(shape.B) * shape.T);
    return d;
}

}  // namespace llmtrain
