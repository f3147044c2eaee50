// tools/prep/llmc.hpp — llm.c's token shards (karpathy/llm.c dev/data/data_common.py, write_datafile)
// read as one stream of GPT-2 tokens, for `llmtrain-prep --from-llmc`.
//
// A shard is a header of 256 little-endian int32 — [0] magic, [1] version, [2] token count, the
// rest 0 — then the tokens: magic 20240520 version 1 = uint16 tokens (GPT-2), magic 20240801
// version 7 = uint32 tokens (llm.c's LLaMA-3 shards; accepted, but every token must still be a
// GPT-2 id). docs/data.md "llm.c shards".
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace llmtrain::prep {

struct LlmcStats {
    uint64_t tokens = 0;
    uint64_t documents = 0;  ///< segments ending after an end-of-text token, plus a final one without
};

/// Streams the tokens of `files` (in the given order, as one stream) to `emit(tokens, n, ends_doc)`
/// in pieces of at most 1 Mi tokens; ends_doc is true when the piece ends right after an
/// `eot` token (a document ends there) or at the end of the last file with a non-empty tail.
/// Memory: one piece, whatever the shard size. Errors: PrepError naming the file: shorter than the
/// header, bad magic, version not matching the magic, negative token count, truncated (fewer
/// token bytes than the header says), trailing bytes, a token >= vocab_size (with its index).
LlmcStats read_llmc_shards(const std::vector<std::string>& files, int eot, int vocab_size,
                           const std::function<void(const int32_t*, size_t, bool)>& emit);

}  // namespace llmtrain::prep
