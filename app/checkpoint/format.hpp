// app/checkpoint/format.hpp — pieces shared by the checkpoint writer (write.cpp) and reader
// (read.cpp): the state.toml format, directory naming, and the crash-test hook that
// counts file-system operations. Internal to app/checkpoint/; the public API is app/checkpoint/checkpoint.hpp.
#pragma once
#include <cstdint>
#include <filesystem>
#include <hdf5.h>
#include <string>
#include <utility>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"
#include "app/checkpoint/raw_h5.hpp"

namespace llmtrain::ckpt {

namespace fs = std::filesystem;

/// state.toml format written now; formats 1 (no run id, no checksums), 2 (no sizes) and 3 (no
/// [slices]: model.h5 always hashed whole) still read.
constexpr int kFormatVersion = 4;
/// The line that starts state.toml's trailing self-checksum section.
constexpr const char* kIntegrityHeader = "[integrity]\n";

/// model.h5's datasets: every tensor of the layout by GPT-2 name and global shape, at the root.
std::vector<RawDataset> model_datasets(const ParamLayout& layout);

/// Throws CheckpointError unless every element of x[0, n) is finite; `what` names the tensor.
void require_finite(const float* x, size_t n, const std::string& what);

/// Call just before each file-system operation of the protocol (create, write of a dataset or
/// file, flush, fsync, rename, remove), from any thread, and around the snapshot copy (saver.cpp). With LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP=<k> in the
/// environment the k-th call raises SIGKILL (crash tests); otherwise it only counts.
void fs_op();

/// "step_<N>" -> N, or -1 for any other name.
int64_t step_of(const std::string& name);

/// Every entry of dir, sorted by path; empty when dir does not exist (or a component of its path is
/// a file). Errors: CheckpointError
/// naming dir and the OS reason when it cannot be opened or read to the end (a partial listing
/// is never returned).
std::vector<fs::path> list_dir(const fs::path& dir);

/// Every directory step_<N> under ckdir (complete or not) as (N, path), ascending by N; empty when
/// ckdir does not exist. Errors: as list_dir.
std::vector<std::pair<int64_t, fs::path>> step_dirs(const fs::path& ckdir);

/// state.toml text for st listing `files` (name, size, hex SHA-256), self-checksum included.
std::string state_to_toml(const TrainState& st, const std::vector<PartInfo>& files);

/// state.toml as read back.
struct StateFile {
    TrainState st;
    int version = 0;
    std::vector<PartInfo> files;  ///< empty in format 1; bytes is 0 (unknown) in format 2
};

/// Reads and checks dir/state.toml: TOML syntax, every key, and (format 2) the self-checksum.
/// Errors: CheckpointError naming the file and the key or the mismatch.
StateFile read_state_file(const std::string& dir);

}  // namespace llmtrain::ckpt
