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
// A mixture (LoaderOptions::sources, config [[data.sources]]) interleaves several such streams:
// global sample i goes to the source data/mixture.hpp picks, and is that source's next sample in
// its own stream (its own windows, epochs and permutations, seeded by run seed and source name).
// Each source is one file or a glob of shards read as one (data/sharded_dataset.hpp).
// One background I/O thread owns the HDF5 files and reads each micro-batch with one call per file, one batch ahead.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/token_dataset.hpp"

namespace llmtrain {

/// One source of a mixture's position (state.toml [[loader.sources]]).
struct SourceState {
    std::string name;
    double weight = 0;       ///< its weight when saved: a resume with other weights starts a new draw
    uint64_t position = 0;   ///< samples taken from it ever: the next index of its own window stream
    uint64_t drawn = 0;      ///< samples taken from it since the current weights took effect
    friend bool operator==(const SourceState&, const SourceState&) = default;
};

/// Exact position in the window stream; saved in checkpoints. Independent of the layout: every dp
/// rank reports the same one, and a loader of any B and world restored to it goes on with the
/// samples that follow.
struct LoaderState {
    uint64_t sample = 0;  ///< global samples consumed: the next micro-batches start at this stream index
    uint64_t seed = 0;    ///< the seed of the stream's epoch permutations
    std::vector<SourceState> sources;  ///< a mixture's sources, in LoaderOptions::sources order; empty for one path
    friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

/// One source of a mixture: `path` is a file or a glob of shards (data/sharded_dataset.hpp).
struct SourceSpec {
    std::string name, path;
    double weight = 1;  ///< > 0, any scale: the shares are weight / sum of weights
};

struct LoaderOptions {
    std::string path;                 ///< the one source (a file or a glob) when `sources` is empty
    std::vector<SourceSpec> sources;  ///< a mixture: names unique, weights > 0; `path` unused
    int B = 4, T = 256;
    int rank = 0, world = 1;   ///< data-parallel rank and size
    uint64_t seed = 1337;
    bool shuffle = true;
    int vocab_size = 0;        ///< model vocab: tokens >= it are an error; the file's vocab_size must be <= it
    std::string expect_tokenizer_sha256;  ///< if non-empty, must equal the file's tokenizer_sha256
};

class DataLoader {
public:
    /// Opens the files on the I/O thread and checks them. Errors: DataError naming the file and the problem
    /// (including "fewer than B*world windows" for one path, a source with no window for a mixture,
    /// and sources tokenized differently).
    explicit DataLoader(const LoaderOptions& opt);
    ~DataLoader();
    /// The (first) source's attributes: path, tokenizer, vocab_size, eos_id; n_tokens and n_docs of it alone.
    const DatasetInfo& info() const;
    /// Every source's attributes (one entry for one path), in LoaderOptions::sources order.
    const std::vector<DatasetInfo>& source_info() const;
    /// Fills inputs and targets (B*T int32 each) with the next micro-batch; wraps to the next epoch.
    /// Errors: DataError from the I/O thread (bad token id, read failure) is rethrown here.
    void next(int32_t* inputs, int32_t* targets);
    /// Position of the next micro-batch next() returns: {opt.seed's stream, 0} at the start, then
    /// B*world samples further per next().
    LoaderState state() const;
    /// Goes on at a position saved by state() of a loader with any B and world, in s.seed's stream
    /// (the seed it was saved with, whatever opt.seed is); drops any prefetched batch. Never throws.
    /// A mixture takes each source's position by name (0 for a source s lacks) and continues the
    /// draw exactly when s has the same names and weights; otherwise the draw starts afresh from
    /// here with the new weights (drawn = 0), each source keeping its position. One path restored
    /// from a mixture's state reads from stream index s.sample.
    void restore(const LoaderState& s);
    /// The position of {epoch, batch} as saved before positions were stream indices (llmtrain's
    /// state.toml [loader] epoch, batch): this rank's micro-batch `batch` of an epoch that took
    /// batches_per_epoch() micro-batches and skipped the rest. That is stream index
    /// epoch*n_windows + batch*B*world, exact only when B and world are those it was saved with.
    LoaderState legacy_position(uint64_t epoch, uint64_t batch) const;
    /// floor(n_windows / (B * world)): micro-batches per rank in one pass over the file (evaluation
    /// reads this many for the whole file); a mixture's n_windows is the sum over its sources.
    uint64_t batches_per_epoch() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
