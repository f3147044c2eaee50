// tools/prep/llmc.cpp — reads llm.c token shards (see llmc.hpp).
#include "tools/prep/llmc.hpp"

#include <cstring>
#include <fstream>

#include "tools/prep/corpus.hpp"

namespace llmtrain::prep {

namespace {

constexpr int kHeaderInts = 256;
constexpr int32_t kMagicGpt2 = 20240520, kMagicLlama3 = 20240801;
constexpr size_t kPiece = 1 << 20;  // tokens per read

}  // namespace

LlmcStats read_llmc_shards(const std::vector<std::string>& files, int eot, int vocab_size,
                           const std::function<void(const int32_t*, size_t, bool)>& emit) {
    LlmcStats st;
    bool open_doc = false;  // tokens emitted since the last document end
    std::vector<unsigned char> raw;
    std::vector<int32_t> piece;
    for (const std::string& file : files) {
        std::ifstream in(file, std::ios::binary | std::ios::ate);
        if (!in) throw PrepError("llm.c shard " + file + ": cannot open for reading");
        const uint64_t size = static_cast<uint64_t>(in.tellg());
        in.seekg(0);
        int32_t header[kHeaderInts];  // little-endian on disk; this program runs on little-endian hosts
        if (size < sizeof header || !in.read(reinterpret_cast<char*>(header), sizeof header))
            throw PrepError("llm.c shard " + file + ": " + std::to_string(size) +
                            " bytes, shorter than the 1024-byte header (truncated?)");
        const int32_t magic = header[0], version = header[1], count = header[2];
        if (magic != kMagicGpt2 && magic != kMagicLlama3)
            throw PrepError("llm.c shard " + file + ": bad magic " + std::to_string(magic) + " (expected " +
                            std::to_string(kMagicGpt2) + " for GPT-2 or " + std::to_string(kMagicLlama3) +
                            " for LLaMA-3 shards)");
        const int want_version = magic == kMagicGpt2 ? 1 : 7;
        if (version != want_version)
            throw PrepError("llm.c shard " + file + ": version " + std::to_string(version) + " with magic " +
                            std::to_string(magic) + " (expected version " + std::to_string(want_version) + ")");
        if (count < 0) throw PrepError("llm.c shard " + file + ": negative token count " + std::to_string(count));
        const size_t width = version == 1 ? 2 : 4;
        const uint64_t want = sizeof header + static_cast<uint64_t>(count) * width;
        if (size < want)
            throw PrepError("llm.c shard " + file + ": truncated: the header says " + std::to_string(count) +
                            " tokens (" + std::to_string(want) + " bytes), the file has " + std::to_string(size) +
                            " bytes");
        if (size > want)
            throw PrepError("llm.c shard " + file + ": " + std::to_string(size - want) +
                            " bytes after the header's " + std::to_string(count) + " tokens");
        for (uint64_t done = 0; done < static_cast<uint64_t>(count);) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(kPiece, count - done));
            raw.resize(n * width);
            if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size())))
                throw PrepError("llm.c shard " + file + ": read error at token " + std::to_string(done));
            piece.resize(n);
            for (size_t i = 0; i < n; ++i) {
                uint32_t t = 0;
                if (width == 2) {
                    uint16_t v;
                    std::memcpy(&v, &raw[2 * i], 2);
                    t = v;
                } else {
                    std::memcpy(&t, &raw[4 * i], 4);
                }
                if (t >= static_cast<uint32_t>(vocab_size))
                    throw PrepError("llm.c shard " + file + ": token " + std::to_string(t) + " at index " +
                                    std::to_string(done + i) + " is outside GPT-2's vocabulary [0, " +
                                    std::to_string(vocab_size) + ")" +
                                    (version == 7 ? " (version 7 shards normally hold LLaMA-3 tokens)" : ""));
                piece[i] = static_cast<int32_t>(t);
            }
            // Cut the piece after every end-of-text token: each cut ends a document.
            size_t from = 0;
            for (size_t i = 0; i < n; ++i)
                if (piece[i] == eot) {
                    emit(piece.data() + from, i + 1 - from, true);
                    ++st.documents;
                    open_doc = false;
                    from = i + 1;
                }
            if (from < n) {
                emit(piece.data() + from, n - from, false);
                open_doc = true;
            }
            done += n;
            st.tokens += n;
        }
    }
    if (open_doc) {  // the tail after the last end-of-text token is a document too
        emit(piece.data(), 0, true);
        ++st.documents;
    }
    return st;
}

}  // namespace llmtrain::prep
