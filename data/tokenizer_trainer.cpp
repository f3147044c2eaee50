// data/tokenizer_trainer.cpp — SentencePiece BPE training from a line stream (see .hpp).
#include "data/tokenizer_trainer.hpp"

#include <sentencepiece_trainer.h>

#include <deque>
#include <unordered_map>

#include "data/token_dataset.hpp"

namespace llmtrain {

std::vector<std::string> split_long_line(const std::string& line, size_t max_bytes) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (line.size() - pos > max_bytes) {
        size_t cut = std::string::npos;
        for (size_t i = pos + max_bytes; i > pos; --i)
            if (line[i] == ' ' || line[i] == '\t') {
                cut = i;
                break;
            }
        if (cut != std::string::npos) {
            out.push_back(line.substr(pos, cut - pos));
            pos = cut + 1;
            continue;
        }
        // No whitespace: cut before a UTF-8 continuation byte is never allowed (10xxxxxx).
        cut = pos + max_bytes;
        while (cut > pos + 1 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
        out.push_back(line.substr(pos, cut - pos));
        pos = cut;
    }
    out.push_back(line.substr(pos));
    return out;
}

namespace {

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

// Feeds SentencePiece one sentence at a time: lines from the source, blank ones skipped, long
// ones split into several sentences.
class LineIterator : public sentencepiece::SentenceIterator {
public:
    LineIterator(const LineSource& src, TokenizerTrainStats* stats) : src_(src), stats_(stats) { Next(); }
    bool done() const override { return done_; }
    const std::string& value() const override { return value_; }
    sentencepiece::util::Status status() const override { return {}; }
    void Next() override {
        while (queue_.empty()) {
            std::string line;
            if (!src_(line)) {
                done_ = true;
                return;
            }
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (blank(line)) continue;
            if (line.size() > kMaxSentenceBytes) {
                ++stats_->split_lines;
                for (auto& piece : split_long_line(line, kMaxSentenceBytes))
                    if (!blank(piece)) queue_.push_back(std::move(piece));
            } else {
                queue_.push_back(std::move(line));
            }
        }
        value_ = std::move(queue_.front());
        queue_.pop_front();
        ++stats_->sentences;
    }

private:
    const LineSource& src_;
    TokenizerTrainStats* stats_;
    std::deque<std::string> queue_;
    std::string value_;
    bool done_ = false;
};

}  // namespace

std::string train_bpe_tokenizer(const TokenizerTrainOptions& opt, const LineSource& next_line,
                                TokenizerTrainStats* stats) {
    if (opt.vocab_size < 260)
        throw DataError("tokenizer training: vocab_size " + std::to_string(opt.vocab_size) +
                        " is too small: byte_fallback needs 3 special + 256 byte pieces, so at least 260");
    if (!(opt.character_coverage > 0 && opt.character_coverage <= 1))
        throw DataError("tokenizer training: character_coverage must be in (0, 1], got " +
                        std::to_string(opt.character_coverage));
    if (opt.num_threads < 1) throw DataError("tokenizer training: num_threads must be >= 1");
    const std::unordered_map<std::string, std::string> args = {
        {"model_type", "bpe"},
        {"vocab_size", std::to_string(opt.vocab_size)},
        {"character_coverage", std::to_string(opt.character_coverage)},
        {"input_sentence_size", std::to_string(opt.input_sentence_size)},
        {"shuffle_input_sentence", "true"},
        {"num_threads", std::to_string(opt.num_threads)},
        {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
        {"byte_fallback", "true"},
        {"unk_id", "0"},
        {"bos_id", "1"},
        {"eos_id", "2"},
        {"pad_id", "-1"},
        {"minloglevel", "1"},  // SentencePiece's INFO progress lines off; warnings stay
    };
    TokenizerTrainStats local;
    if (!stats) stats = &local;
    *stats = {};
    sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(opt.seed));
    LineIterator it(next_line, stats);
    std::string model;
    auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
    if (stats->sentences == 0) throw DataError("tokenizer training: the corpus has no non-blank lines");
    if (!status.ok()) throw DataError("tokenizer training: " + status.ToString());
    return model;
}

}  // namespace llmtrain
