// tools/prep/llmc_shard.cpp — llmc_shard: one tokenized HDF5 dataset (data/token_dataset.hpp) ->
// one llm.c token shard, the same tokens in the same order: the reverse of `llmtrain-prep
// --from-llmc` (tools/prep/llmc.hpp). tools/gpu/run.sh writes llm.c's input with it from the very
// train.h5 its GPT-2 runs read, so llm.c's train_gpt2cu trains on the same token stream.
//
// Usage: llmc_shard <in.h5> <out.bin> [min_tokens (default 0)]
// Output (karpathy/llm.c dev/data/data_common.py write_datafile, llmc/dataloader.h): a header of
// 256 little-endian int32 — [0] magic 20240520, [1] version 1, [2] token count, the rest 0 — then
// the tokens as little-endian uint16. min_tokens > n: the stream is repeated (whole copies, then a
// prefix) until it holds min_tokens tokens: llm.c's loader asserts every shard holds at least
// B*T + 1 tokens (it wraps around an epoch as our loader does). Written to out.bin.tmp, renamed.
// Errors (exit 1, message on stderr): the dataset's errors (DataError), a token id >= 65536
// (version 1 stores uint16), a count over INT32_MAX (the header's int32), an empty dataset, a
// write failure. Memory: one 1 Mi-token piece. This program runs on little-endian hosts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/token_dataset.hpp"

namespace {

constexpr int32_t kMagic = 20240520, kVersion = 1;
constexpr uint64_t kPiece = 1 << 20;

int run(const std::string& in_path, const std::string& out_path, uint64_t min_tokens) {
    llmtrain::TokenDataset ds(in_path);
    const uint64_t n = ds.info().n_tokens;
    if (n == 0) throw llmtrain::DataError(in_path + ": no tokens");
    const uint64_t total = n >= min_tokens ? n : min_tokens;
    if (total > INT32_MAX)
        throw llmtrain::DataError(out_path + ": " + std::to_string(total) +
                                  " tokens do not fit the llm.c header's int32 count");
    const std::string tmp = out_path + ".tmp";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw llmtrain::DataError(tmp + ": cannot open for writing");
    int32_t header[256] = {kMagic, kVersion, static_cast<int32_t>(total)};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    std::vector<int32_t> piece;
    std::vector<uint16_t> packed;
    for (uint64_t done = 0; done < total;) {
        const uint64_t at = done % n, len = std::min({kPiece, n - at, total - done});
        piece.resize(len);
        ds.read_windows({at}, static_cast<int>(len), piece.data(), ds.info().vocab_size);
        packed.resize(len);
        for (uint64_t i = 0; i < len; ++i) {
            if (piece[i] < 0 || piece[i] > 65535)
                throw llmtrain::DataError(in_path + ": token " + std::to_string(piece[i]) + " at position " +
                                          std::to_string(at + i) + " does not fit llm.c's uint16 shards");
            packed[i] = static_cast<uint16_t>(piece[i]);
        }
        out.write(reinterpret_cast<const char*>(packed.data()), static_cast<std::streamsize>(len * 2));
        done += len;
    }
    out.close();
    if (!out) throw llmtrain::DataError(tmp + ": write failed");
    std::filesystem::rename(tmp, out_path);
    std::printf("llmc_shard: %s: %llu tokens (%llu in %s)\n", out_path.c_str(), static_cast<unsigned long long>(total),
                static_cast<unsigned long long>(n), in_path.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3 || argc > 4) {
        std::fprintf(stderr, "usage: llmc_shard <in.h5> <out.bin> [min_tokens]\n");
        return 2;
    }
    try {
        return run(argv[1], argv[2], argc == 4 ? std::strtoull(argv[3], nullptr, 10) : 0);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llmc_shard: %s\n", e.what());
        return 1;
    }
}
