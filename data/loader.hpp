// data/loader.hpp — micro-batches of (inputs, targets) windows from a TokenDataset.
//
// Window w covers tokens [w*T, w*T + T + 1): inputs are its first T tokens, targets its last T.
// Training order: windows are permuted deterministically from (seed, epoch); batch k of rank r in
// an epoch takes permuted windows [(k*world + r)*B, (k*world + r + 1)*B), so no two data-parallel
// ranks read the same window in an epoch. Evaluation (shuffle = false) reads windows in order.
// The permutation is Fisher–Yates over splitmix64 (data/window_order.hpp): the same on every platform.
// The n_windows mod (B*world) windows left over in an epoch are not read (different ones each epoch).
// One background I/O thread owns the HDF5 file and reads each micro-batch with one call, one batch ahead.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "data/token_dataset.hpp"

namespace llmtrain {

/// Exact position of a loader; saved in checkpoints.
struct LoaderState {
    uint64_t epoch = 0;
    uint64_t batch = 0;  ///< next batch index within the epoch (per rank)
};

struct LoaderOptions {
    std::string path;
    int B = 4, T = 256;
    int rank = 0, world = 1;   ///< data-parallel rank and size
    uint64_t seed = 1337;
    bool shuffle = true;
    int vocab_size = 0;        ///< model vocab: tokens >= it are an error; the file's vocab_size must be <= it
    std::string expect_tokenizer_sha256;  ///< if non-empty, must equal the file's tokenizer_sha256
};

class DataLoader {
public:
    /// Opens the file on the I/O thread and checks it. Errors: DataError naming the file and the problem
    /// (including "fewer than B*world windows").
    explicit DataLoader(const LoaderOptions& opt);
    ~DataLoader();
    const DatasetInfo& info() const;
    /// Fills inputs and targets (B*T int32 each) with the next micro-batch; wraps to the next epoch.
    /// Errors: DataError from the I/O thread (bad token id, read failure) is rethrown here.
    void next(int32_t* inputs, int32_t* targets);
    LoaderState state() const;              ///< position of the next batch next() returns
    /// Restores a position saved by state(); drops any prefetched batch. Exact when s.batch <
    /// batches_per_epoch(). A larger index (saved with a smaller world or B, e.g. resuming at a
    /// larger dp) is past the end of epoch s.epoch here, so the loader goes on at the start of the
    /// next one, {s.epoch + 1, 0}, as next() does after an epoch's last batch; state() reports that.
    /// Never throws.
    void restore(const LoaderState& s);
    uint64_t batches_per_epoch() const;     ///< floor(n_windows / (B * world))

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
