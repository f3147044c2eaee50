// data/token_dataset.hpp — the tokenized HDF5 dataset format (docs/design.md "Formats").
//
//   /tokens       1-D uint16 (vocab_size <= 65536) or uint32, chunked (~1-4 MiB), uncompressed
//   /doc_offsets  1-D uint64, n_docs + 1 entries: document d is tokens[doc_offsets[d], doc_offsets[d+1])
//   /tokenizer    1-D uint8: the SentencePiece model bytes, the ranks file (tiktoken format) of a
//                 named tiktoken encoding, or a "tiktoken" container (pattern, specials, eos/bos, ranks)
//   attributes on /: format_version (int, 2), tokenizer (tokenizer_kinds()), vocab_size, eos_id,
//                    bos_id (int), tokenizer_sha256 (string). Version 1 files (no `tokenizer`
//                    attribute, always SentencePiece) are still read.
// Files use HDF5's 1.10 format (checksummed metadata: corruption is detected, not read as data).
// HDF5 1.10 has one global lock: open and read a dataset from one I/O thread only.
// docs/data.md describes the format and every check.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmtrain {

/// A bad, missing or mismatched data file; what() names the file and what was expected.
struct DataError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct DatasetInfo {
    std::string path;
    int format_version = 2;
    std::string tokenizer = "sentencepiece";  ///< the kind: one of tokenizer_kinds() (Tokenizer::kind())
    uint64_t n_tokens = 0;
    uint64_t n_docs = 0;
    int vocab_size = 0;
    int eos_id = -1;
    int bos_id = -1;
    std::string tokenizer_sha256;  ///< hex SHA-256 of the /tokenizer bytes
    int token_bytes = 2;           ///< 2 (uint16) or 4 (uint32)
};

/// Read side. Errors: DataError (missing file, not HDF5, truncated or corrupted metadata, missing
/// dataset/attribute, wrong type, format_version not 1 or 2, unknown tokenizer kind, /tokens dtype not matching vocab_size,
/// inconsistent /doc_offsets, tokenizer hash mismatch).
class TokenDataset {
public:
    explicit TokenDataset(const std::string& path);
    ~TokenDataset();
    const DatasetInfo& info() const;
    /// Reads windows [starts[i], starts[i] + len) of /tokens into out (starts.size() * len int32),
    /// with ONE H5Dread over the union of hyperslabs; windows may overlap, repeat and come in any
    /// order. Errors: DataError if a window is out of range or a token id >= limit_vocab (names
    /// the file and the token position).
    void read_windows(const std::vector<uint64_t>& starts, int len, int32_t* out, int limit_vocab);
    /// The bytes stored in /tokenizer (a SentencePiece model or GPT-2's ranks, see info().tokenizer).
    std::string tokenizer_bytes();
    /// /doc_offsets (n_docs + 1).
    std::vector<uint64_t> doc_offsets();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Write side, used by llmtrain-prep and tests. Writes into `path`.tmp and renames on finish().
class TokenDatasetWriter {
public:
    /// `tokenizer_kind` is one of tokenizer_kinds(): "sentencepiece" (the model bytes), "gpt2",
    /// "cl100k_base", "o200k_base" (the ranks file) or "tiktoken" (Tokenizer's container).
    /// Errors: DataError if the directory is missing or not writable, vocab_size < 1, eos_id outside
    /// [0, vocab_size), bos_id outside [-1, vocab_size), the tokenizer bytes are empty or the kind unknown.
    TokenDatasetWriter(const std::string& path, int vocab_size, int eos_id, int bos_id,
                       const std::string& tokenizer_model_bytes,
                       const std::string& tokenizer_kind = "sentencepiece");
    ~TokenDatasetWriter();
    /// Appends one document (its tokens, EOS already included by the caller). Errors: DataError
    /// naming the document and position of a token id outside [0, vocab_size).
    void add_document(const std::vector<int32_t>& tokens);
    /// Streaming form of add_document for documents of any length: append() the tokens of the
    /// current document in pieces, then end_document(). Errors: as add_document (the position is
    /// counted from the document's start).
    void append(const int32_t* tokens, size_t n);
    void end_document();
    /// Flushes, writes /doc_offsets and attributes, closes, fsyncs and renames into place.
    /// A writer destroyed without finish() removes its temporary file.
    void finish();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// The values the `tokenizer` attribute may take: sentencepiece, gpt2, cl100k_base, o200k_base, tiktoken.
const std::vector<std::string>& tokenizer_kinds();
/// True if `kind` is one of tokenizer_kinds().
bool is_tokenizer_kind(const std::string& kind);
/// tokenizer_kinds() joined with ", " (for error messages).
std::string tokenizer_kinds_text();

/// Hex SHA-256 of `bytes` (FIPS 180-4), used for tokenizer_sha256.
std::string sha256_hex(const std::string& bytes);
/// Hex SHA-256 of the file at `path`, read in 4 MiB blocks (bounded memory for multi-GB files);
/// used for checkpoint checksums. Errors: DataError naming the file and the OS reason.
std::string sha256_file_hex(const std::string& path);
/// Hex SHA-256 of bytes [lo, hi) of the file at `path` (a slice of a checkpoint's model.h5).
/// Errors: DataError naming the file when it cannot be read or ends before hi.
std::string sha256_file_range_hex(const std::string& path, uint64_t lo, uint64_t hi);

}  // namespace llmtrain
