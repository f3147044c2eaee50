// app/shared_storage.hpp — at start, every rank proves it sees rank 0's run_dir (docs/multinode.md
// "Shared storage"): checkpoints are written by every rank into one directory and read back by any
// rank on resume, so a node with a file system of its own (node-local /tmp on a real cluster)
// would write parts nobody else sees and resume from nothing.
#pragma once
#include <string>

#include "parallel/comm.hpp"

namespace llmtrain {

/// Collective over `comm` (the world). Rank 0 creates run_dir if needed and writes a token file
/// there (a random value and its host), every rank reads it back, rank 0 removes it (and run_dir
/// again if it made it and a rank failed). Errors: ConfigError (exit 2, nothing left written)
/// naming run.run_dir, the ranks that did not see the token, their nodes and hosts, and why
/// (missing, different); std::runtime_error when rank 0 cannot write there. One rank: no check.
void check_shared_run_dir(const std::string& run_dir, Comm& comm);

}  // namespace llmtrain
