// data/sharded_dataset.cpp — a glob of token files read as one concatenated stream (see .hpp).
#include "data/sharded_dataset.hpp"

#include <glob.h>

#include <algorithm>

namespace llmtrain {

std::vector<std::string> expand_data_path(const std::string& pattern) {
    if (pattern.find_first_of("*?[") == std::string::npos) return {pattern};
    glob_t g{};
    const int rc = glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
    std::vector<std::string> files;
    if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (files.empty()) throw DataError(pattern + ": no file matches");
    std::sort(files.begin(), files.end());  // std::string's < compares bytes: the same order everywhere
    return files;
}

ShardedDataset::ShardedDataset(const std::string& pattern) : files_(expand_data_path(pattern)) {
    offsets_.push_back(0);
    for (const std::string& f : files_) {
        shards_.push_back(std::make_unique<TokenDataset>(f));
        const DatasetInfo& di = shards_.back()->info();
        if (shards_.size() == 1) {
            info_ = di;
        } else {
            const DatasetInfo& first = shards_.front()->info();
            auto differs = [&](const char* what, const std::string& a, const std::string& b) {
                return DataError(f + ": " + what + " " + a + " differs from " + files_.front() + "'s " + b +
                                 " (every shard of " + pattern + " must come from the same tokenizer)");
            };
            if (di.vocab_size != first.vocab_size)
                throw differs("vocab_size", std::to_string(di.vocab_size), std::to_string(first.vocab_size));
            if (di.eos_id != first.eos_id)
                throw differs("eos_id", std::to_string(di.eos_id), std::to_string(first.eos_id));
            if (di.tokenizer_sha256 != first.tokenizer_sha256)
                throw differs("tokenizer_sha256", di.tokenizer_sha256, first.tokenizer_sha256);
            info_.n_docs += di.n_docs;
        }
        offsets_.push_back(offsets_.back() + di.n_tokens);
    }
    info_.path = pattern;
    info_.n_tokens = offsets_.back();
}

ShardedDataset::~ShardedDataset() = default;

const DatasetInfo& ShardedDataset::info() const { return info_; }

const std::vector<std::string>& ShardedDataset::files() const { return files_; }

std::string ShardedDataset::tokenizer_bytes() { return shards_.front()->tokenizer_bytes(); }

void ShardedDataset::read_windows(const std::vector<uint64_t>& starts, int len, int32_t* out, int limit_vocab) {
    if (shards_.size() == 1) {  // one file: exactly TokenDataset's read
        shards_[0]->read_windows(starts, len, out, limit_vocab);
        return;
    }
    const size_t n_shards = shards_.size();
    std::vector<std::vector<uint64_t>> local(n_shards);  // the windows inside shard s, shard-relative
    std::vector<std::vector<size_t>> row(n_shards);      // and their rows in out
    for (size_t i = 0; i < starts.size(); ++i) {
        const uint64_t g = starts[i];
        if (g + uint64_t(len) > offsets_.back())
            throw DataError(info_.path + ": window [" + std::to_string(g) + ", " + std::to_string(g + len) +
                            ") is past the end of its " + std::to_string(offsets_.back()) + " tokens");
        size_t s = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), g) - offsets_.begin()) - 1;
        if (g + uint64_t(len) <= offsets_[s + 1]) {
            local[s].push_back(g - offsets_[s]);
            row[s].push_back(i);
            continue;
        }
        // A window across shards: each piece from its shard.
        uint64_t pos = g;
        int done = 0;
        while (done < len) {
            while (pos >= offsets_[s + 1]) ++s;  // skips empty shards too
            const int take = int(std::min<uint64_t>(uint64_t(len - done), offsets_[s + 1] - pos));
            shards_[s]->read_windows({pos - offsets_[s]}, take, out + i * size_t(len) + done, limit_vocab);
            pos += uint64_t(take);
            done += take;
        }
    }
    std::vector<int32_t> tmp;
    for (size_t s = 0; s < n_shards; ++s) {
        if (local[s].empty()) continue;
        tmp.resize(local[s].size() * size_t(len));
        shards_[s]->read_windows(local[s], len, tmp.data(), limit_vocab);
        for (size_t j = 0; j < row[s].size(); ++j)
            std::copy_n(tmp.data() + j * size_t(len), len, out + row[s][j] * size_t(len));
    }
}

}  // namespace llmtrain
