// data/sharded_dataset.hpp — one source of training tokens: one HDF5 token file (data/token_dataset.hpp)
// or a glob of many shards, read as if the shards were one file concatenated in name order.
//
// So no single 200 GB file is needed: llmtrain-prep's outputs (or llm.c's converted shards) are
// listed by a pattern such as "data/web/train_*.h5". The shards are sorted by their names' bytes
// (not the locale) so the order is the same on every platform; a window may span the end of one
// shard and the start of the next, exactly as in the concatenated file (docs/data.md "Sources").
// Like TokenDataset, a ShardedDataset is used from one thread only (HDF5's lock, data/h5.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/token_dataset.hpp"

namespace llmtrain {

/// The files `pattern` names: itself when it has no glob characters (* ? [), else every match of
/// glob(3) sorted by bytes. Errors: DataError "<pattern>: no file matches" for a glob with no match.
std::vector<std::string> expand_data_path(const std::string& pattern);

class ShardedDataset {
public:
    /// Opens every file of expand_data_path(pattern). Errors: DataError from TokenDataset (names the
    /// shard), or naming the shard whose vocab_size, eos_id or tokenizer_sha256 differs from the first's.
    explicit ShardedDataset(const std::string& pattern);
    ~ShardedDataset();
    /// The first shard's attributes, with path = the pattern and n_tokens, n_docs summed over shards.
    const DatasetInfo& info() const;
    /// The shard files, in stream order.
    const std::vector<std::string>& files() const;
    /// Reads windows [starts[i], starts[i] + len) of the concatenated tokens into out
    /// (starts.size() * len int32): one TokenDataset::read_windows per shard for the windows inside
    /// it, the pieces of a window spanning shards read apiece. Errors: DataError naming the pattern
    /// for a window past the end, or TokenDataset's (a token id >= limit_vocab, a read failure).
    void read_windows(const std::vector<uint64_t>& starts, int len, int32_t* out, int limit_vocab);
    /// The tokenizer bytes of the first shard (all shards share them: checked at open).
    std::string tokenizer_bytes();

private:
    std::vector<std::unique_ptr<TokenDataset>> shards_;
    std::vector<uint64_t> offsets_;  // shard s holds tokens [offsets_[s], offsets_[s+1]) of the stream
    std::vector<std::string> files_;
    DatasetInfo info_;
};

}  // namespace llmtrain
