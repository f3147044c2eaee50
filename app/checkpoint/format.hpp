// app/checkpoint/format.hpp — pieces shared by the checkpoint writer (write.cpp) and reader
// (read.cpp): the state.toml format, directory naming, and the crash-test hook that
// counts file-system operations. Internal to app/checkpoint/; the public API is app/checkpoint/checkpoint.hpp.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"

namespace llmtrain::ckpt {

namespace fs = std::filesystem;

/// state.toml format written now; format 1 (no run id, no checksums) is still read.
constexpr int kFormatVersion = 2;
/// The line that starts state.toml's trailing self-checksum section.
constexpr const char* kIntegrityHeader = "[integrity]\n";

/// Call just before each file-system operation of the protocol (create, write of a dataset or
/// file, flush, fsync, rename, remove). With LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP=<k> in the
/// environment the k-th call raises SIGKILL (crash tests); otherwise it only counts.
void fs_op();

/// "step_<N>" -> N, or -1 for any other name.
int64_t step_of(const std::string& name);

/// Every directory step_<N> under ckdir (complete or not) as (N, path), ascending by N.
std::vector<std::pair<int64_t, fs::path>> step_dirs(const fs::path& ckdir);

/// state.toml text for st listing `files` as (file name, hex SHA-256), self-checksum included.
std::string state_to_toml(const TrainState& st, const std::vector<std::pair<std::string, std::string>>& files);

/// state.toml as read back.
struct StateFile {
    TrainState st;
    int version = 0;
    std::vector<std::pair<std::string, std::string>> files;  ///< (name, hex SHA-256); empty in format 1
};

/// Reads and checks dir/state.toml: TOML syntax, every key, and (format 2) the self-checksum.
/// Errors: CheckpointError naming the file and the key or the mismatch.
StateFile read_state_file(const std::string& dir);

}  // namespace llmtrain::ckpt
