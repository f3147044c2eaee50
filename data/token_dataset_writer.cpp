// data/token_dataset_writer.cpp — writes the token dataset format of token_dataset.hpp.
//
// Tokens and document offsets are buffered one chunk (2 MiB) at a time and appended to extendible
// chunked datasets, so memory stays bounded however large the corpus. The file is created with HDF5 1.10's newest
// format (libver bounds V110), whose superblock, object headers and chunk index carry checksums:
// corrupted metadata is then reported by the reader instead of being read as garbage.
// Everything goes into "<path>.tmp", which finish() fsyncs and renames over <path>; an abandoned
// writer removes its temporary file, so a failed run never replaces a good dataset.
#include <filesystem>
#include <vector>

#include "data/h5.hpp"
#include "data/token_dataset.hpp"

namespace llmtrain {

namespace {

constexpr hsize_t kChunkBytes = 2u << 20;  // 2 MiB: inside docs/data.md's 1-4 MiB

void write_int_attr(hid_t file, const char* name, int64_t value, const std::string& ctx) {
    h5::Handle space(h5::check(H5Screate(H5S_SCALAR), ctx));
    h5::Handle attr(h5::check(H5Acreate2(file, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                              ctx + ": attribute " + name));
    h5::check_status(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), ctx + ": attribute " + name);
}

void write_string_attr(hid_t file, const char* name, const std::string& value, const std::string& ctx) {
    h5::Handle type(h5::check(H5Tcopy(H5T_C_S1), ctx));
    h5::check_status(H5Tset_size(type.get(), value.size()), ctx);
    h5::check_status(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), ctx);
    h5::Handle space(h5::check(H5Screate(H5S_SCALAR), ctx));
    h5::Handle attr(h5::check(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                              ctx + ": attribute " + name));
    h5::check_status(H5Awrite(attr.get(), type.get(), value.data()), ctx + ": attribute " + name);
}

// A contiguous 1-D dataset holding `n` elements of `mem_type` from `data`, stored as `file_type`.
void write_1d(hid_t file, const char* name, hid_t file_type, hid_t mem_type, const void* data, hsize_t n,
              const std::string& ctx) {
    h5::Handle space(h5::check(H5Screate_simple(1, &n, nullptr), ctx));
    h5::Handle ds(h5::check(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                            ctx + ": create " + name));
    if (n > 0)
        h5::check_status(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), ctx + ": write " + name);
}

// A 1-D dataset filled by appending: chunked, extendible, uncompressed, created on the first flush.
// Values wait in `pending` until a whole chunk is there, so memory is one chunk however long it gets.
template <class T>
struct Appender {
    const char* name;
    hid_t file_type, mem_type;
    hsize_t chunk;  // elements per chunk
    h5::Handle ds;
    std::vector<T> pending;
    uint64_t n_written = 0;

    uint64_t size() const { return n_written + pending.size(); }
    void push(hid_t file, T v, const std::string& tmp) {
        pending.push_back(v);
        if (pending.size() == chunk) flush(file, chunk, tmp);
    }
    // The last flush: a dataset smaller than one chunk gets a chunk of its own size (edge chunks are
    // stored whole).
    void finish(hid_t file, const std::string& tmp) {
        flush(file, ds.valid() ? chunk : std::max<hsize_t>(1, pending.size()), tmp);
    }
    void flush(hid_t file, hsize_t chunk_dims, const std::string& tmp) {
        const std::string ctx = tmp + ": /" + name;
        if (!ds.valid()) {
            hsize_t dims = 0, maxdims = H5S_UNLIMITED;
            h5::Handle space(h5::check(H5Screate_simple(1, &dims, &maxdims), ctx));
            h5::Handle dcpl(h5::check(H5Pcreate(H5P_DATASET_CREATE), ctx));
            h5::check_status(H5Pset_chunk(dcpl.get(), 1, &chunk_dims), ctx);
            ds = h5::Handle(h5::check(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                      ctx + ": create"));
        }
        if (pending.empty()) return;
        hsize_t start = n_written, count = pending.size(), total = n_written + pending.size();
        h5::check_status(H5Dset_extent(ds.get(), &total), ctx + ": extend");
        h5::Handle fspace(h5::check(H5Dget_space(ds.get()), ctx));
        h5::check_status(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr), ctx);
        h5::Handle mspace(h5::check(H5Screate_simple(1, &count, nullptr), ctx));
        h5::check_status(H5Dwrite(ds.get(), mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, pending.data()),
                         ctx + ": write");
        n_written = total;
        pending.clear();
    }
};

}  // namespace

const std::vector<std::string>& tokenizer_kinds() {
    static const std::vector<std::string> kinds = {"sentencepiece", "gpt2", "cl100k_base", "o200k_base", "tiktoken"};
    return kinds;
}

bool is_tokenizer_kind(const std::string& kind) {
    for (const std::string& k : tokenizer_kinds())
        if (k == kind) return true;
    return false;
}

std::string tokenizer_kinds_text() {
    std::string s;
    for (const std::string& k : tokenizer_kinds()) s += (s.empty() ? "" : ", ") + k;
    return s;
}

struct TokenDatasetWriter::Impl {
    std::string path, tmp;
    int vocab_size, eos_id, bos_id;
    std::string tokenizer, kind;
    h5::Handle file;
    // HDF5 types and the tokens' chunk set by the constructor, under the HDF5 lock (data/h5.hpp).
    Appender<uint32_t> tokens{"tokens", 0, 0, 0, {}, {}, 0};
    Appender<uint64_t> offsets{"doc_offsets", 0, 0, kChunkBytes / 8, {}, {}, 0};
    uint64_t doc_start = 0;  // token index where the current document starts
    uint64_t n_docs = 0;
    bool finished = false;
};

TokenDatasetWriter::TokenDatasetWriter(const std::string& path, int vocab_size, int eos_id, int bos_id,
                                       const std::string& tokenizer_model_bytes, const std::string& tokenizer_kind)
    : impl_(std::make_unique<Impl>()) {
    Impl& w = *impl_;
    w.path = path;
    w.tmp = path + ".tmp";
    if (vocab_size < 1) throw DataError(path + ": vocab_size must be >= 1, got " + std::to_string(vocab_size));
    if (eos_id < 0 || eos_id >= vocab_size)
        throw DataError(path + ": eos_id " + std::to_string(eos_id) + " is outside [0, vocab_size " +
                        std::to_string(vocab_size) + ")");
    if (bos_id < -1 || bos_id >= vocab_size)
        throw DataError(path + ": bos_id " + std::to_string(bos_id) + " is outside [-1, vocab_size)");
    if (tokenizer_model_bytes.empty()) throw DataError(path + ": the tokenizer model bytes are empty");
    if (!is_tokenizer_kind(tokenizer_kind))
        throw DataError(path + ": unknown tokenizer kind '" + tokenizer_kind + "' (" + tokenizer_kinds_text() + ")");
    w.kind = tokenizer_kind;
    w.vocab_size = vocab_size;
    w.eos_id = eos_id;
    w.bos_id = bos_id;
    w.tokenizer = tokenizer_model_bytes;
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    if (!std::filesystem::is_directory(dir))
        throw DataError(path + ": output directory " + dir.string() + " does not exist");
    h5::Lock lock;
    const bool narrow = vocab_size <= 65536;
    w.tokens.file_type = narrow ? H5T_STD_U16LE : H5T_STD_U32LE;
    w.tokens.mem_type = H5T_NATIVE_UINT32;
    w.tokens.chunk = kChunkBytes / (narrow ? 2 : 4);
    w.offsets.file_type = H5T_STD_U64LE;
    w.offsets.mem_type = H5T_NATIVE_UINT64;
    h5::Handle fapl(h5::check(H5Pcreate(H5P_FILE_ACCESS), w.tmp));
    h5::check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST), w.tmp);
    w.file = h5::Handle(h5::check(H5Fcreate(w.tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                                  "cannot create " + w.tmp));
    w.tokens.pending.reserve(w.tokens.chunk);
    w.offsets.push(w.file.get(), 0, w.tmp);
}

TokenDatasetWriter::~TokenDatasetWriter() {
    if (!impl_ || impl_->finished) return;
    h5::Lock lock;
    impl_->tokens.ds.reset();
    impl_->offsets.ds.reset();
    impl_->file.reset();
    std::error_code ec;
    std::filesystem::remove(impl_->tmp, ec);
}

void TokenDatasetWriter::add_document(const std::vector<int32_t>& tokens) {
    append(tokens.data(), tokens.size());
    end_document();
}

void TokenDatasetWriter::append(const int32_t* tokens, size_t n) {
    Impl& w = *impl_;
    if (w.finished) throw DataError(w.path + ": add_document after finish()");
    const uint64_t in_doc = w.tokens.size() - w.doc_start;  // tokens of this document so far
    for (size_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= w.vocab_size)
            throw DataError(w.path + ": document " + std::to_string(w.n_docs) + " position " +
                            std::to_string(in_doc + i) + ": token id " + std::to_string(tokens[i]) +
                            " is outside [0, vocab_size " + std::to_string(w.vocab_size) + ")");
    h5::Lock lock;
    for (size_t i = 0; i < n; ++i) w.tokens.push(w.file.get(), static_cast<uint32_t>(tokens[i]), w.tmp);
}

void TokenDatasetWriter::end_document() {
    Impl& w = *impl_;
    if (w.finished) throw DataError(w.path + ": add_document after finish()");
    h5::Lock lock;
    w.doc_start = w.tokens.size();
    w.offsets.push(w.file.get(), w.doc_start, w.tmp);
    ++w.n_docs;
}

void TokenDatasetWriter::finish() {
    Impl& w = *impl_;
    if (w.finished) return;
    h5::Lock lock;
    const hid_t f = w.file.get();
    w.tokens.finish(f, w.tmp);
    w.offsets.finish(f, w.tmp);
    write_1d(f, "tokenizer", H5T_STD_U8LE, H5T_NATIVE_UINT8, w.tokenizer.data(), w.tokenizer.size(), w.tmp);
    write_int_attr(f, "format_version", 2, w.tmp);
    write_string_attr(f, "tokenizer", w.kind, w.tmp);
    write_int_attr(f, "vocab_size", w.vocab_size, w.tmp);
    write_int_attr(f, "eos_id", w.eos_id, w.tmp);
    write_int_attr(f, "bos_id", w.bos_id, w.tmp);
    write_string_attr(f, "tokenizer_sha256", sha256_hex(w.tokenizer), w.tmp);
    w.tokens.ds.reset();
    w.offsets.ds.reset();
    h5::check_status(H5Fflush(f, H5F_SCOPE_GLOBAL), w.tmp + ": flush");
    w.file.reset();
    h5::fsync_path(w.tmp);
    std::error_code ec;
    std::filesystem::rename(w.tmp, w.path, ec);
    if (ec) throw DataError("cannot rename " + w.tmp + " to " + w.path + ": " + ec.message());
    std::filesystem::path dir = std::filesystem::path(w.path).parent_path();
    h5::fsync_path(dir.empty() ? "." : dir.string());
    w.finished = true;
}

}  // namespace llmtrain
