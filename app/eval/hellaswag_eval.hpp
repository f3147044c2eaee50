// app/eval/hellaswag_eval.hpp — HellaSwag during training (run.eval_hellaswag_interval): the items read
// and encoded once at start-up, this data-parallel rank's share scored through the trainer's own
// forward (the val eval's), the counts summed over the ranks (docs/evaluation.md "HellaSwag").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "app/eval/hellaswag.hpp"
#include "app/report/metrics.hpp"
#include "app/report/run_log.hpp"
#include "model/gpt.hpp"
#include "parallel/comm.hpp"
#include "parallel/pipeline.hpp"

namespace llmtrain {

class HellaSwagInLoop {
public:
    /// Scores in micro-batches of (B, T): the run's RunShape B (training.micro_batch_size) and T
    /// (model.seq_len), handed down by the trainer with its vocab_size (model.vocab_size). Reads data.hellaswag (empty: the project's copy,
    /// checked by SHA-256), its first
    /// run.eval_hellaswag_items items (0: all), and encodes every one of them with the tokenizer of
    /// data.train (on every rank, so an item longer than model.seq_len fails on all ranks alike),
    /// keeping items i with i % dp == dp_index (the data index and count: the ranks of a
    /// context-parallel group score the same items together). Errors: HellaSwagError naming the file and item,
    /// DataError (data.train's tokenizer), ConfigError when the tokenizer's vocabulary exceeds
    /// model.vocab_size.
    HellaSwagInLoop(const Config& cfg, int B, int T, int vocab_size, int dp_index, int dp);

    /// Collective over `comm` (every rank of the job calls it): scores this rank's items through
    /// `forward` with micro-batches of (B, T) (the constructor's), every rank
    /// running the same number of forwards, then sums the counts over the ranks; only ranks with
    /// `report` add theirs (one rank per data-parallel index: the last pipeline stage's TP index 0).
    /// Returns the job's counts on every rank. Errors: CommError, as forward.
    HellaSwagCounts evaluate(const RowForward& forward, Comm& comm, bool report);

    /// evaluate() through the val eval's forward: GPT::evaluate, or PipelineStage::evaluate when
    /// `pipe` is set (every stage; the last holds the losses), then GPT::window_losses (with
    /// context parallelism the CP group's rows gathered in window order). `tp_index0`: this rank
    /// reports (TP index 0, and CP index 0 with cp). Collective as evaluate().
    HellaSwagCounts evaluate(GPT& gpt, PipelineStage* pipe, bool last_stage, bool tp_index0, Comm& comm);

    size_t total_items() const { return total_; }  ///< items scored over all ranks

    /// `step 250/1000 | hellaswag acc 0.2500 acc_norm 0.2700 (10,042 items)`
    static std::string log_line(int64_t step, int64_t max_steps, const HellaSwagCounts& c);
    /// The counts of one evaluation to the log (log_line), losses.tsv (kinds "hellaswag" and
    /// "hellaswag_norm": acc and acc_norm in the loss column) and, when metrics is set,
    /// llmtrain_eval_hellaswag_accuracy{norm="none"|"tokens"}.
    static void report(int64_t step, int64_t max_steps, const HellaSwagCounts& c, RunLog& log, Metrics* metrics);

private:
    std::vector<HellaSwagRows> mine_;  // this dp rank's items
    size_t total_ = 0;
    int B_, T_, dp_;
};

}  // namespace llmtrain
