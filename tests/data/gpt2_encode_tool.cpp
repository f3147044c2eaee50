// tests/data/gpt2_encode_tool.cpp — encodes files with GPT-2's tokenizer (data/gpt2_bpe.hpp), for
// the comparison with js-tiktoken (test_gpt2_tokenizer.py) and the benchmark
// (tools/bench/gpt2_tokenizer_bench.sh).
//
//   gpt2_encode_tool RANKS FILE...    one line per file: its ids separated by spaces, or
//                                     "error: <message>" (invalid UTF-8)
//   gpt2_encode_tool --bench RANKS FILE...   encodes all files twice on one thread and prints
//                                     "tokens N bytes B seconds S" of the second pass (reading not timed)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "data/gpt2_bpe.hpp"
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
    const bool bench = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
    const int first = bench ? 2 : 1;
    if (argc < first + 2) {
        std::fprintf(stderr, "usage: gpt2_encode_tool [--bench] RANKS FILE...\n");
        return 2;
    }
    try {
        llmtrain::Gpt2Bpe bpe(slurp(argv[first]), argv[first]);
        std::vector<std::string> texts;
        for (int i = first + 1; i < argc; ++i) texts.push_back(slurp(argv[i]));
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
            } catch (const llmtrain::DataError& e) {
                std::printf("error: %s\n", e.what());
                continue;
            }
            for (size_t k = 0; k < ids.size(); ++k) std::printf(k ? " %d" : "%d", ids[k]);
            std::printf("\n");
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpt2_encode_tool: %s\n", e.what());
        return 1;
    }
    return 0;
}
