// tests/data/tiktoken_encode_tool.cpp — encodes files with a tokenizer of the tiktoken family
// (data/tiktoken_bpe.hpp with a named encoding's pattern and specials), for the comparison with
// js-tiktoken (test_tiktoken_tokenizer.py) and the benchmark (tools/bench/tiktoken_tokenizer_bench.sh).
//
//   tiktoken_encode_tool ENCODING RANKS FILE...   one line per file: its ids separated by spaces,
//                                                 or "error: <message>" (invalid UTF-8)
//   tiktoken_encode_tool --bench ENCODING RANKS FILE...   encodes all files twice on one thread and
//                                                 prints "tokens N bytes B seconds S" of the second pass
//   tiktoken_encode_tool --pattern ENCODING       prints the encoding's split pattern (js-tiktoken's
//                                                 notation) and, on a second line, what PCRE2 compiles
// ENCODING: gpt2, cl100k_base or o200k_base (any number of ranks is accepted here).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

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
}  // namespace

int main(int argc, char** argv) {
    using namespace llmtrain;
    const bool bench = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
    const bool pattern = argc > 1 && std::strcmp(argv[1], "--pattern") == 0;
    const int first = bench || pattern ? 2 : 1;
    if (argc < first + (pattern ? 1 : 3)) {
        std::fprintf(stderr, "usage: tiktoken_encode_tool [--bench] ENCODING RANKS FILE... | --pattern ENCODING\n");
        return 2;
    }
    const TiktokenEncoding* e = find_tiktoken_encoding(argv[first]);
    if (!e) {
        std::fprintf(stderr, "tiktoken_encode_tool: unknown encoding '%s'\n", argv[first]);
        return 2;
    }
    if (pattern) {
        std::printf("%s\n%s\n", e->js_pattern.c_str(), pcre2_pattern_from_js(e->js_pattern).c_str());
        return 0;
    }
    try {
        TiktokenBpe bpe(slurp(argv[first + 1]), argv[first + 1], e->js_pattern, e->specials);
        std::vector<std::string> texts;
        for (int i = first + 2; i < argc; ++i) texts.push_back(slurp(argv[i]));
        if (bench) {
            std::vector<int32_t> ids;
            size_t bytes = 0, tokens = 0;
            for (const auto& t : texts) bpe.encode(t, ids);  // warm-up pass, like the JavaScript side's
            auto t0 = std::chrono::steady_clock::now();
            for (const auto& t : texts) {
                ids.clear();
                bpe.encode(t, ids);
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
                bpe.encode(t, ids);
            } catch (const DataError& err) {
                std::printf("error: %s\n", err.what());
                continue;
            }
            for (size_t k = 0; k < ids.size(); ++k) std::printf(k ? " %d" : "%d", ids[k]);
            std::printf("\n");
        }
    } catch (const std::exception& err) {
        std::fprintf(stderr, "tiktoken_encode_tool: %s\n", err.what());
        return 1;
    }
    return 0;
}
