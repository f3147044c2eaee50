// app/trainer_progress.hpp — how far a training run has come, one of Trainer::Impl's owned pieces
// (app/trainer_impl.hpp): the counters state.toml records (the step, the tokens seen, the run's id
// and restarts, docs/checkpoints.md "Checkpoints") and the non-finite steps in a row that
// training.max_skipped_steps bounds. Plain values, the same on every rank; no I/O, no collectives.
#pragma once
#include <cstdint>
#include <string>

#include "app/checkpoint/checkpoint.hpp"

namespace llmtrain {

struct TrainProgress {
    int64_t step = 0;                   // optimizer steps done (the next one's 0-based index)
    int64_t start_step = 0;             // `step` when this process started (0, or the checkpoint's)
    uint64_t tokens_seen = 0;           // tokens trained on over the whole run, every rank's (all restarts)
    std::string run_id = new_run_id();  // replaced by the checkpoint's on resume
    int64_t restarts = 0;               // this run's starts from its own checkpoints, this one included
    int skipped_in_a_row = 0;           // consecutive non-finite steps (training.max_skipped_steps)

    /// After a step of `tokens` tokens (the global batch x seq_len), updated or not.
    void advance(uint64_t tokens) {
        ++step;
        tokens_seen += tokens;
    }

    /// After a step: 0 when it `updated`, else one more in a row. Returns the count.
    int count_skip(bool updated) { return skipped_in_a_row = updated ? 0 : skipped_in_a_row + 1; }

    /// The counters of a checkpoint's state.toml `st` at a resume: its step (also start_step), tokens
    /// and run id (kept when the checkpoint has none, format 1), one restart more than it records.
    void resume(const TrainState& st) {
        if (!st.run_id.empty()) run_id = st.run_id;
        restarts = st.restarts + 1;
        step = start_step = st.step;
        tokens_seen = st.tokens_seen;
    }

    /// Writes the counters state.toml records into `st` (step, tokens_seen, run_id, restarts).
    void record(TrainState& st) const {
        st.step = step;
        st.tokens_seen = tokens_seen;
        st.run_id = run_id;
        st.restarts = restarts;
    }
};

}  // namespace llmtrain
