// app/eval/hellaswag.hpp — HellaSwag (Zellers et al. 2019, "HellaSwag: Can a Machine Really Finish Your
// Sentence?"): its validation items, their rows of tokens, and the scoring rule llm.c uses
// (docs/evaluation.md "HellaSwag").
//
// An item is a context and four endings, one of them correct. Each ending makes one row: the
// context's tokens followed by the tokens of " " + ending, encoded on their own. The model's loss at
// the positions that predict the ending's tokens is summed per row: `acc` picks the ending with the
// lowest sum, `acc_norm` the lowest mean per ending token (ties: the lower index). The items come in
// the six-line text format of the klosax/hellaswag_text_data repository (the project's copy:
// data_files/hellaswag/, gzip, checked by SHA-256): `activity_label: ctx`, the correct index (0-3),
// then the four endings, one line each.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/tokenizer.hpp"

namespace llmtrain {

/// A missing, damaged or malformed HellaSwag file, or an item that does not fit; what() names the
/// file and the item.
struct HellaSwagError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Items in HellaSwag's validation split.
constexpr size_t kHellaSwagValItems = 10042;
/// SHA-256 of the project's copy, decompressed (data_files/hellaswag/README.md).
constexpr const char* kHellaSwagValSha256 = "d572539320eb2050e858ca34b495bbe2103e3b3f1391a9c3bcdf215b0bb93bd1";

/// The project's copy of the validation split (data_files/hellaswag/hellaswag_val.txt.gz in the
/// source tree this binary was built from).
std::string hellaswag_default_path();

struct HellaSwagItem {
    std::string context;               ///< the first line as stored: "activity_label: ctx"
    int label = 0;                     ///< index of the correct ending, 0..3
    std::array<std::string, 4> endings;
    size_t line = 0;                   ///< 1-based line of the context in the file
};

/// Reads the items of a six-line file, gzip-compressed (decompressed with zlib) or plain text; the
/// first `max_items` (0: all). With `expect_sha256` non-empty the whole decompressed text must have
/// that hex SHA-256. Errors: HellaSwagError naming the file: missing, unreadable, a damaged or
/// truncated gzip stream, a SHA-256 other than expected (both given), no items, a line count that
/// is not a multiple of 6, or an item (its 0-based index and line) whose label is not 0-3 or with
/// an empty context or ending.
std::vector<HellaSwagItem> read_hellaswag(const std::string& path, const std::string& expect_sha256,
                                          size_t max_items = 0);

/// One item as rows of tokens: row e is the context's tokens followed by those of " " + ending e.
struct HellaSwagRows {
    std::array<std::vector<int32_t>, 4> tokens;  ///< (ctx_len + ending e's length) ids each
    int ctx_len = 0;                             ///< tokens of the context (>= 1)
    int label = 0;
};

/// Encodes item `index` of `file` (for messages) with `tok`. Errors: HellaSwagError naming the item,
/// its line and the file when a row is longer than `max_len` tokens (the model's seq_len: no
/// silent cut; both lengths given), or when the context or an ending encodes to no tokens.
HellaSwagRows encode_hellaswag(const HellaSwagItem& item, const Tokenizer& tok, int max_len, size_t index,
                               const std::string& file);

/// What the model chose for one item.
struct HellaSwagChoice {
    int pred = 0;       ///< argmin of the summed loss over the ending's tokens (acc)
    int pred_norm = 0;  ///< argmin of the mean loss per ending token (acc_norm)
    int label = 0;
    std::array<double, 4> sum{};   ///< summed loss per ending, nats
    std::array<int, 4> n_tokens{}; ///< tokens per ending
};

/// The scoring rule: pred = argmin sum[e], pred_norm = argmin sum[e] / n_tokens[e], the lower index
/// on ties (as torch.argmin). n_tokens must be >= 1 (std::invalid_argument otherwise).
HellaSwagChoice choose_ending(const std::array<double, 4>& sum, const std::array<int, 4>& n_tokens, int label);

/// One forward of a (B,T) micro-batch without gradients: inputs and targets (B,T) host int32;
/// fills losses (B*T, host fp32: the cross-entropy at each position) and returns true, or returns
/// false on a rank that holds no losses (a pipeline's earlier stages).
using RowForward = std::function<bool(const int32_t* inputs, const int32_t* targets, float* losses)>;

/// Forwards that score n items with B rows each: ceil(4 n / B).
size_t hellaswag_forwards(size_t n_items, int B);

/// Scores `items` in forwards of B rows of T positions (row r of the micro-batch: items[r / 4]'s
/// ending r % 4, rows beyond the items filled with token 0), running at least `min_forwards`
/// forwards (ranks that must call the forward alike pass the largest count any of them needs).
/// Every row must be at most T tokens (encode_hellaswag checked it). Returns one choice per item,
/// or nothing where `forward` returned false.
std::vector<HellaSwagChoice> score_hellaswag(const std::vector<HellaSwagRows>& items, int B, int T,
                                             size_t min_forwards, const RowForward& forward);

/// Counts of a scored set; summed over ranks as floats (exact below 2^24 items).
struct HellaSwagCounts {
    double items = 0, correct = 0, correct_norm = 0;
    double acc() const { return items > 0 ? correct / items : 0; }
    double acc_norm() const { return items > 0 ? correct_norm / items : 0; }
};

/// The counts of `choices`.
HellaSwagCounts count_hellaswag(const std::vector<HellaSwagChoice>& choices);

}  // namespace llmtrain
