// app/resume_choice.hpp — which checkpoint a job resumes from, chosen and verified by all its ranks
// together (docs/checkpoints.md "Who does what at a commit", "Resume").
//
// Rank 0 tidies the leftovers of an interrupted write and follows checkpoint.resume through the one
// lookup (app/checkpoint/lookup.cpp) with every check but the SHA-256s; then every rank hashes its
// share of the candidate's files and slices (checkpoint_problem(dir, rank, world)): no rank reads a
// whole checkpoint alone while the others wait. A candidate some rank finds damaged is refused and
// rank 0 looks again (the lookup then passes over it, as one process would). Rank 0's lookup and
// each rank's hashing run under run_busy, so ranks waiting on them keep waiting past
// parallel.timeout_s (up to checkpoint.timeout_s) while the busy rank answers.
#pragma once
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "parallel/comm.hpp"

namespace llmtrain {

/// What resume_choice() decided: the same on every rank.
struct ResumeDecision {
    std::string dir;                 ///< the checkpoint to resume from; "" = from scratch
    std::vector<std::string> notes;  ///< rank 0: log lines (leftovers tidied, checkpoints passed over)
};

/// Collective over `comm` (every rank of the job). Errors: CheckpointError on every rank, with rank
/// 0's message, when checkpoint.resume cannot be followed (resolve_resume's errors).
ResumeDecision resume_choice(const Config& cfg, Comm& comm);

}  // namespace llmtrain
