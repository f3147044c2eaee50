// data/tokenizer_trainer.hpp — trains a SentencePiece BPE tokenizer (Kudo & Richardson 2018;
// BPE after Sennrich et al. 2016) through the C++ trainer API, for llmtrain-prep.
//
// Fixed choices: model_type bpe, byte_fallback on (no <unk> for unseen characters), unk 0,
// bos 1, eos 2, no pad piece; input sentences sampled down to input_sentence_size and shuffled.
// SentencePiece silently skips training sentences longer than max_sentence_length (4192 bytes),
// so lines are split first (split_long_line) and counted.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace llmtrain {

/// SentencePiece's default max_sentence_length, in bytes.
constexpr size_t kMaxSentenceBytes = 4192;

struct TokenizerTrainOptions {
    int vocab_size = 8192;
    double character_coverage = 0.9995;  ///< fraction of characters covered by pieces; the rest use bytes
    uint64_t input_sentence_size = 1000000;  ///< sentences sampled for training; 0 = all
    int num_threads = 1;
    uint64_t seed = 1337;  ///< SentencePiece's sampling/shuffling seed
};

struct TokenizerTrainStats {
    uint64_t sentences = 0;    ///< non-empty sentences handed to SentencePiece
    uint64_t split_lines = 0;  ///< lines longer than kMaxSentenceBytes that were split
};

/// Writes the next raw line into `line` and returns true, or returns false at the end.
using LineSource = std::function<bool(std::string& line)>;

/// Trains on every line `next_line` yields (whitespace-only lines skipped, long ones split) and
/// returns the serialized model (.model bytes). Errors: DataError "tokenizer training: <reason>",
/// e.g. vocab_size below 260 (3 special + 256 byte pieces + 1) or too small for the characters.
std::string train_bpe_tokenizer(const TokenizerTrainOptions& opt, const LineSource& next_line,
                                TokenizerTrainStats* stats);

/// Splits `line` into pieces of at most max_bytes bytes, each cut at the last space or tab that
/// fits (the space is dropped), else at the last UTF-8 character boundary that fits, so no text
/// is lost. A line that fits is returned whole.
std::vector<std::string> split_long_line(const std::string& line, size_t max_bytes);

}  // namespace llmtrain
