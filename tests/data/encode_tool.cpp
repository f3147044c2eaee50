// tests/data/encode_tool.cpp — encodes files with one of our byte-level BPE tokenizers, for the
// comparisons with js-tiktoken (test_gpt2_tokenizer.py, test_tiktoken_tokenizer.py) and the
// benchmarks (tools/bench/gpt2_tokenizer_bench.sh, tools/bench/tiktoken_tokenizer_bench.sh).
//
//   encode_tool ENCODING RANKS FILE...          one line per file: its ids separated by spaces, or
//                                               "error: <message>" (invalid UTF-8)
//   encode_tool --bench ENCODING RANKS FILE...  encodes all files twice on one thread and prints
//                                               "tokens N bytes B seconds S" of the second pass
//                                               (reading not timed)
//   encode_tool --pattern ENCODING              prints a tiktoken encoding's split pattern
//                                               (js-tiktoken's notation) and, on a second line, what
//                                               PCRE2 compiles
// ENCODING: gpt2-bpe (GPT-2's own tokenizer, data/gpt2_bpe.hpp), or a tiktoken-family encoding
// (data/tiktoken_bpe.hpp with its pattern and specials): gpt2, cl100k_base or o200k_base (any
// number of ranks is accepted here).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include "data/gpt2_bpe.hpp"
#include "data/tiktoken_bpe.hpp"
#include "data/tiktoken_encodings.hpp"
#include "data/token_dataset.hpp"

namespace {
std::string slurp(const char* path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(std::string("cannot read ") + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
using Encode = std::function<void(const std::string&, std::vector<int32_t>&)>;
}  // namespace

int main(int argc, char** argv) {
    using namespace llmtrain;
    const bool bench = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
    const bool pattern = argc > 1 && std::strcmp(argv[1], "--pattern") == 0;
    const int first = bench || pattern ? 2 : 1;
    if (argc < first + (pattern ? 1 : 3)) {
        std::fprintf(stderr, "usage: encode_tool [--bench] ENCODING RANKS FILE... | --pattern ENCODING\n");
        return 2;
    }
    const bool gpt2_bpe = std::strcmp(argv[first], "gpt2-bpe") == 0;
    const TiktokenEncoding* e = gpt2_bpe ? nullptr : find_tiktoken_encoding(argv[first]);
    if (!gpt2_bpe && !e) {
        std::fprintf(stderr, "encode_tool: unknown encoding '%s' (expected gpt2-bpe or a tiktoken encoding)\n", argv[first]);
        return 2;
    }
    if (pattern) {
        if (!e) return 2;
        std::printf("%s\n%s\n", e->js_pattern.c_str(), pcre2_pattern_from_js(e->js_pattern).c_str());
        return 0;
    }
    try {
        const std::string ranks = slurp(argv[first + 1]);
        Encode encode;
        if (gpt2_bpe) {
            auto t = std::make_shared<Gpt2Bpe>(ranks, argv[first + 1]);
            encode = [t](const std::string& s, std::vector<int32_t>& ids) { t->encode(s, ids); };
        } else {
            auto t = std::make_shared<TiktokenBpe>(ranks, argv[first + 1], e->js_pattern, e->specials);
            encode = [t](const std::string& s, std::vector<int32_t>& ids) { t->encode(s, ids); };
        }
        std::vector<std::string> texts;
        for (int i = first + 2; i < argc; ++i) texts.push_back(slurp(argv[i]));
        if (bench) {
            std::vector<int32_t> ids;
            size_t bytes = 0, tokens = 0;
            for (const auto& t : texts) encode(t, ids);  // warm-up pass, like the JavaScript side's
            auto t0 = std::chrono::steady_clock::now();
            for (const auto& t : texts) {
                ids.clear();
                encode(t, ids);
                tokens += ids.size();
                bytes += t.size();
            }
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("tokens %zu bytes %zu seconds %.6f\n", tokens, bytes, s);
            return 0;
        }
        for (const auto& t : texts) {
            std::vector<int32_t> ids;
            try {
                encode(t, ids);
            } catch (const DataError& err) {
                std::printf("error: %s\n", err.what());
                continue;
            }
            for (size_t k = 0; k < ids.size(); ++k) std::printf(k ? " %d" : "%d", ids[k]);
            std::printf("\n");
        }
    } catch (const std::exception& err) {
        std::fprintf(stderr, "encode_tool: %s\n", err.what());
        return 1;
    }
    return 0;
}
