// app/trainer_data.hpp — what a training run reads, one of Trainer::Impl's owned pieces
// (app/trainer_impl.hpp): the train loader (this rank's share of the data stream), the val loaders
// (the main one and a mixture's per-source ones), a mixture's positions last reported, and the host
// micro-batch the step and the evaluation fill. Built first at setup, so a bad data file fails
// before any large allocation (docs/data.md "DataLoader").
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "app/config/config.hpp"
#include "app/state/run_shape.hpp"
#include "data/loader.hpp"
#include "parallel/topology.hpp"

namespace llmtrain {

struct TrainerData {
    std::unique_ptr<DataLoader> train, val;  // val: only with run.eval_interval > 0
    // A mixture's sources (data.sources), in order: each one's own val loader (nullptr without `val`
    // or with run.eval_interval = 0), and its stream position last reported to the metrics.
    std::vector<std::unique_ptr<DataLoader>> source_val;
    std::vector<uint64_t> source_reported;
    std::vector<int32_t> inputs, targets;  // (B, T) host int32: one micro-batch
};

/// Opens cfg's train loader (shuffled, run.seed) and, with run.eval_interval > 0, its val loaders
/// (in order, tokenized like the train data), each reading micro-batches of (shape.B, shape.T) for
/// this rank's data index: a TP group and a CP group read the same batches (each CP rank then keeps
/// its chunks of every window, model/context_parallel.hpp). Errors: DataError naming the file.
TrainerData open_trainer_data(const Config& cfg, const RunShape& shape, const Topology& topo);

}  // namespace llmtrain
