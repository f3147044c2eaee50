// tests/app/make_tiny_dataset.cpp — writes the tiny train/val datasets the trainer tests use.
//
// Usage: make_tiny_dataset <out_dir>  ->  <out_dir>/{train.h5,val.h5,vocab_size.txt}
// Text: seeded pseudo-English documents (a fixed word list), so every run writes the same files.
// Tokenizer: a 320-piece SentencePiece BPE model trained on that text (data/tokenizer_trainer.hpp);
// documents end with EOS, as llmtrain-prep writes them.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"
#include "data/tokenizer_trainer.hpp"

using namespace llmtrain;

namespace {

std::vector<std::string> make_docs(int n, uint64_t seed) {
    static const char* words[] = {"the", "a", "cat", "dog", "sat", "on", "mat", "ran", "to", "house",
                                  "big", "small", "red", "green", "tree", "under", "over", "quick", "brown",
                                  "fox", "jumps", "lazy", "river", "stone", "bird", "sings", "at", "dawn",
                                  "and", "then", "sleeps", "in", "warm", "sun", "cold", "rain", "falls"};
    const int nw = sizeof(words) / sizeof(words[0]);
    std::mt19937_64 g(seed);
    std::vector<std::string> docs;
    for (int d = 0; d < n; ++d) {
        std::string doc;
        const int sentences = 2 + int(g() % 4);
        for (int s = 0; s < sentences; ++s) {
            const int len = 4 + int(g() % 6);
            for (int w = 0; w < len; ++w) {
                std::string word = words[g() % nw];
                if (w == 0) word[0] = char(word[0] - 'a' + 'A');
                doc += word + (w + 1 < len ? " " : ". ");
            }
        }
        docs.push_back(doc);
    }
    return docs;
}

void write(const std::string& path, const Tokenizer& tok, const std::vector<std::string>& docs) {
    TokenDatasetWriter w(path, tok.vocab_size(), tok.eos_id(), tok.bos_id(), tok.model_bytes());
    for (const auto& d : docs) {
        auto ids = tok.encode(d);
        ids.push_back(tok.eos_id());
        w.add_document(ids);
    }
    w.finish();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_tiny_dataset <out_dir>\n");
        return 2;
    }
    const std::filesystem::path out(argv[1]);
    std::filesystem::create_directories(out);
    const auto train_docs = make_docs(400, 1), val_docs = make_docs(60, 2);
    size_t next = 0;
    TokenizerTrainOptions opt;
    opt.vocab_size = 320;
    opt.character_coverage = 1.0;
    opt.input_sentence_size = 0;
    TokenizerTrainStats stats;
    std::string model = train_bpe_tokenizer(
        opt,
        [&](std::string& line) {
            if (next == train_docs.size()) return false;
            line = train_docs[next++];
            return true;
        },
        &stats);
    Tokenizer tok = Tokenizer::from_bytes(model, "make_tiny_dataset");
    write((out / "train.h5").string(), tok, train_docs);
    write((out / "val.h5").string(), tok, val_docs);
    std::ofstream(out / "vocab_size.txt") << tok.vocab_size() << "\n";
    std::printf("wrote %s/{train,val}.h5, vocab %d\n", out.c_str(), tok.vocab_size());
    return 0;
}
