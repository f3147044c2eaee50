// data/loader.hpp — micro-batches of (inputs, targets) windows from a TokenDataset.
//
// Window w covers tokens [w*T, w*T + T + 1): inputs are its first T tokens, targets its last T.
// Training reads the window stream of data/window_order.hpp: global sample i is window
// perm(seed, i div n_windows)[i mod n_windows], epochs back to back with nothing skipped, and
// micro-batch m of dp rank r (of world) takes samples (m*world + r)*B + [0, B) from the position it
// started or was restored at. So the dp ranks never share a window within an epoch, a step reads
// global_batch_size consecutive samples whatever the layout, and the position — global samples
// consumed, plus the seed — is the same on every rank and in every layout (docs/data.md).
// Evaluation (shuffle = false) reads windows in file order. The permutation is Fisher–Yates over
// splitmix64: the same on every platform.
// One background I/O thread owns the HDF5 file and reads each micro-batch with one call, one batch ahead.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "data/token_dataset.hpp"

namespace llmtrain {

/// Exact position in the window stream; saved in checkpoints. Independent of the layout: every dp
/// rank reports the same one, and a loader of any B and world restored to it goes on with the
/// samples that follow.
struct LoaderState {
    uint64_t sample = 0;  ///< global samples consumed: the next micro-batches start at this stream index
    uint64_t seed = 0;    ///< the seed of the stream's epoch permutations
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
    /// Position of the next micro-batch next() returns: {opt.seed's stream, 0} at the start, then
    /// B*world samples further per next().
    LoaderState state() const;
    /// Goes on at a position saved by state() of a loader with any B and world, in s.seed's stream
    /// (the seed it was saved with, whatever opt.seed is); drops any prefetched batch. Never throws.
    void restore(const LoaderState& s);
    /// The position of {epoch, batch} as saved before positions were stream indices (llmtrain's
    /// state.toml [loader] epoch, batch): this rank's micro-batch `batch` of an epoch that took
    /// batches_per_epoch() micro-batches and skipped the rest. That is stream index
    /// epoch*n_windows + batch*B*world, exact only when B and world are those it was saved with.
    LoaderState legacy_position(uint64_t epoch, uint64_t batch) const;
    /// floor(n_windows / (B * world)): micro-batches per rank in one pass over the file (evaluation
    /// reads this many for the whole file).
    uint64_t batches_per_epoch() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
