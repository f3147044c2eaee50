// tools/prep/corpus.hpp — the raw-text side of llmtrain-prep: input paths and globs expanded to
// files, and documents streamed from them (one per file, or split at a separator line), so a
// corpus larger than memory is read one line at a time.
#pragma once
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmtrain::prep {

/// Bad command-line input to llmtrain-prep (exit code 2).
struct PrepError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Expands each argument (a file path or a glob(7) pattern) into a sorted, de-duplicated list of
/// regular files. Errors: PrepError naming the argument if a path is missing or a directory, or a
/// pattern matches no file.
std::vector<std::string> expand_inputs(const std::vector<std::string>& args);

/// Streams documents from `files` in order. With an empty separator each file is one document;
/// otherwise a line equal to the separator (ignoring a trailing '\r') ends a document, and so does
/// the end of each file. A document's text is its lines joined by '\n'. Blank (whitespace-only)
/// documents are skipped and counted.
class DocumentReader {
public:
    DocumentReader(std::vector<std::string> files, std::string separator);
    /// Writes the next non-blank document into `doc`; false at the end. Errors: PrepError if a
    /// file cannot be opened or read.
    bool next(std::string& doc);
    uint64_t skipped_blank() const { return skipped_; }
    /// The file the document last returned by next() came from.
    const std::string& document_file() const { return files_[doc_file_]; }

private:
    bool next_any(std::string& doc);  // the next document, blank or not
    std::vector<std::string> files_;
    std::string separator_;
    size_t file_ = 0;       // index of the open file (or the next to open)
    size_t doc_file_ = 0;   // index of the file of the last document
    std::ifstream in_;
    bool open_ = false;
    uint64_t skipped_ = 0;
};

}  // namespace llmtrain::prep
