// data/token_dataset_reader.cpp — opens, validates and reads the token dataset of token_dataset.hpp.
//
// Opening checks everything that can be checked without reading all tokens: HDF5 structure (its
// checksums catch corrupted metadata, its end-of-file check catches truncation), the attributes
// and their types (format_version 1 or 2; 2 adds `tokenizer`), /tokens' dtype against vocab_size,
// /doc_offsets (0, non-decreasing, ends at n_tokens) and the SHA-256 of /tokenizer against tokenizer_sha256. Token ids are checked as they
// are read (read_windows), so every token a model sees has been checked against its vocabulary.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "data/h5.hpp"
#include "data/token_dataset.hpp"

namespace llmtrain {

namespace {

h5::Handle open_attr(hid_t file, const char* name, H5T_class_t want, const std::string& path) {
    htri_t exists = H5Aexists(file, name);  // < 0: the root object header is unreadable (checksum)
    h5::check_status(exists, path + ": attributes of /");
    if (exists == 0) throw DataError(path + ": missing attribute '" + name + "' on /");
    h5::Handle attr(h5::check(H5Aopen(file, name, H5P_DEFAULT), path + ": attribute " + name));
    h5::Handle type(h5::check(H5Aget_type(attr.get()), path + ": attribute " + name));
    h5::Handle space(h5::check(H5Aget_space(attr.get()), path + ": attribute " + name));
    if (H5Tget_class(type.get()) != want || H5Sget_simple_extent_npoints(space.get()) != 1)
        throw DataError(path + ": attribute '" + name + "' must be a single " +
                        (want == H5T_INTEGER ? "integer" : "string"));
    return attr;
}

int64_t read_int_attr(hid_t file, const char* name, const std::string& path) {
    h5::Handle attr = open_attr(file, name, H5T_INTEGER, path);
    int64_t v = 0;
    h5::check_status(H5Aread(attr.get(), H5T_NATIVE_INT64, &v), path + ": attribute " + name);
    return v;
}

// Reads a fixed-length (what the writer stores) or variable-length (what h5py stores for str) string.
std::string read_string_attr(hid_t file, const char* name, const std::string& path) {
    h5::Handle attr = open_attr(file, name, H5T_STRING, path);
    h5::Handle ftype(h5::check(H5Aget_type(attr.get()), path));
    h5::Handle mtype(h5::check(H5Tcopy(H5T_C_S1), path));
    const std::string ctx = path + ": attribute " + name;
    h5::check_status(H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get())), ctx);  // h5py writes UTF-8
    if (H5Tis_variable_str(ftype.get()) > 0) {
        h5::check_status(H5Tset_size(mtype.get(), H5T_VARIABLE), ctx);
        char* s = nullptr;
        h5::check_status(H5Aread(attr.get(), mtype.get(), &s), ctx);
        std::string out = s ? s : "";
        H5free_memory(s);
        return out;
    }
    size_t n = H5Tget_size(ftype.get());
    std::string out(n, '\0');
    h5::check_status(H5Tset_size(mtype.get(), n), ctx);
    h5::check_status(H5Tset_strpad(mtype.get(), H5T_STR_NULLPAD), ctx);
    h5::check_status(H5Aread(attr.get(), mtype.get(), out.data()), ctx);
    out.resize(std::strlen(out.c_str()));
    return out;
}

// Opens a 1-D dataset, returning it and its length.
h5::Handle open_1d(hid_t file, const char* name, hsize_t* n, const std::string& path) {
    htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
    h5::check_status(exists, path + ": links of /");
    if (exists == 0) throw DataError(path + ": missing dataset " + name);
    h5::Handle ds(h5::check(H5Dopen2(file, name, H5P_DEFAULT), path + ": open " + name));
    h5::Handle space(h5::check(H5Dget_space(ds.get()), path + ": " + name));
    if (H5Sget_simple_extent_ndims(space.get()) != 1)
        throw DataError(path + ": dataset " + name + " must be 1-D");
    h5::check_status(H5Sget_simple_extent_dims(space.get(), n, nullptr), path + ": " + name);
    return ds;
}

template <class T>
std::vector<T> read_all(hid_t ds, hid_t mem_type, hsize_t n, const std::string& ctx) {
    std::vector<T> out(n);
    if (n > 0) h5::check_status(H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), ctx);
    return out;
}

}  // namespace

struct TokenDataset::Impl {
    DatasetInfo info;
    h5::Handle file, tokens;
    std::string tokenizer;
    std::vector<uint32_t> scratch;  // the selected tokens of one read, in file order
};

TokenDataset::TokenDataset(const std::string& path) : impl_(std::make_unique<Impl>()) {
    Impl& d = *impl_;
    DatasetInfo& info = d.info;
    info.path = path;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) throw DataError(path + ": no such dataset file");
    h5::Lock lock;
    d.file = h5::Handle(h5::check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT),
                                  path + ": not a readable HDF5 file (truncated or corrupted?)"));
    const hid_t f = d.file.get();

    int64_t version = read_int_attr(f, "format_version", path);
    if (version != 1 && version != 2)
        throw DataError(path + ": format_version " + std::to_string(version) + " is not supported (expected 1 or 2)");
    // Version 2 added the `tokenizer` attribute; version 1 files are all SentencePiece.
    info.tokenizer = version == 1 ? "sentencepiece" : read_string_attr(f, "tokenizer", path);
    if (!is_tokenizer_kind(info.tokenizer))
        throw DataError(path + ": attribute 'tokenizer' is '" + info.tokenizer + "', expected one of " +
                        tokenizer_kinds_text());
    int64_t vocab = read_int_attr(f, "vocab_size", path);
    int64_t eos = read_int_attr(f, "eos_id", path);
    int64_t bos = read_int_attr(f, "bos_id", path);
    if (vocab < 1 || vocab > INT32_MAX) throw DataError(path + ": vocab_size " + std::to_string(vocab) + " is invalid");
    if (eos < 0 || eos >= vocab) throw DataError(path + ": eos_id " + std::to_string(eos) + " is outside [0, vocab_size)");
    if (bos < -1 || bos >= vocab) throw DataError(path + ": bos_id " + std::to_string(bos) + " is outside [-1, vocab_size)");
    info.format_version = static_cast<int>(version);
    info.vocab_size = static_cast<int>(vocab);
    info.eos_id = static_cast<int>(eos);
    info.bos_id = static_cast<int>(bos);
    info.tokenizer_sha256 = read_string_attr(f, "tokenizer_sha256", path);

    hsize_t n_tokens = 0, n_offsets = 0, n_tok_bytes = 0;
    d.tokens = open_1d(f, "tokens", &n_tokens, path);
    h5::Handle type(h5::check(H5Dget_type(d.tokens.get()), path + ": /tokens"));
    const size_t width = H5Tget_size(type.get());
    const size_t want = vocab <= 65536 ? 2 : 4;
    if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_sign(type.get()) != H5T_SGN_NONE || width != want)
        throw DataError(path + ": /tokens must be uint" + std::to_string(8 * want) + " for vocab_size " +
                        std::to_string(vocab) + " (found a " + std::to_string(8 * width) + "-bit " +
                        (H5Tget_sign(type.get()) == H5T_SGN_NONE ? "unsigned" : "non-unsigned") + " type)");
    info.token_bytes = static_cast<int>(width);
    info.n_tokens = n_tokens;

    h5::Handle offs_ds = open_1d(f, "doc_offsets", &n_offsets, path);
    auto offsets = read_all<uint64_t>(offs_ds.get(), H5T_NATIVE_UINT64, n_offsets, path + ": read /doc_offsets");
    if (offsets.empty() || offsets.front() != 0 || offsets.back() != n_tokens ||
        !std::is_sorted(offsets.begin(), offsets.end()))
        throw DataError(path + ": /doc_offsets must start at 0, never decrease and end at n_tokens " +
                        std::to_string(n_tokens));
    info.n_docs = n_offsets - 1;

    h5::Handle tok_ds = open_1d(f, "tokenizer", &n_tok_bytes, path);
    auto bytes = read_all<unsigned char>(tok_ds.get(), H5T_NATIVE_UCHAR, n_tok_bytes, path + ": read /tokenizer");
    d.tokenizer.assign(bytes.begin(), bytes.end());
    std::string actual = sha256_hex(d.tokenizer);
    if (actual != info.tokenizer_sha256)
        throw DataError(path + ": /tokenizer has SHA-256 " + actual + " but attribute tokenizer_sha256 says '" +
                        info.tokenizer_sha256 + "' (corrupted file?)");
}

TokenDataset::~TokenDataset() {
    if (!impl_) return;
    h5::Lock lock;
    impl_->tokens.reset();
    impl_->file.reset();
}

const DatasetInfo& TokenDataset::info() const { return impl_->info; }

std::string TokenDataset::tokenizer_bytes() { return impl_->tokenizer; }

std::vector<uint64_t> TokenDataset::doc_offsets() {
    h5::Lock lock;
    const std::string& path = impl_->info.path;
    hsize_t n = 0;
    h5::Handle ds = open_1d(impl_->file.get(), "doc_offsets", &n, path);
    return read_all<uint64_t>(ds.get(), H5T_NATIVE_UINT64, n, path + ": read /doc_offsets");
}

void TokenDataset::read_windows(const std::vector<uint64_t>& starts, int len, int32_t* out, int limit_vocab) {
    Impl& d = *impl_;
    const std::string& path = d.info.path;
    if (len <= 0) throw DataError(path + ": window length must be positive, got " + std::to_string(len));
    for (uint64_t s : starts)
        if (s > d.info.n_tokens || d.info.n_tokens - s < static_cast<uint64_t>(len))
            throw DataError(path + ": window [" + std::to_string(s) + ", " + std::to_string(s + len) +
                            ") is outside /tokens (" + std::to_string(d.info.n_tokens) + " tokens)");
    if (starts.empty()) return;

    // HDF5 returns a union of hyperslabs in file order with overlaps merged, so select the
    // merged, sorted intervals ourselves and map each window back to its place in the buffer.
    std::vector<size_t> order(starts.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return starts[a] < starts[b]; });
    std::vector<uint64_t> iv_begin, iv_end, iv_buf;  // merged intervals [begin, end) and buffer offsets
    std::vector<uint64_t> window_buf(starts.size());   // buffer offset of each window
    uint64_t total = 0;
    for (size_t i : order) {
        uint64_t b = starts[i], e = starts[i] + len;
        if (iv_end.empty() || b > iv_end.back()) {
            iv_begin.push_back(b);
            iv_end.push_back(e);
            iv_buf.push_back(total);
        } else {
            total -= iv_end.back() - iv_begin.back();
            iv_end.back() = std::max(iv_end.back(), e);
        }
        total += iv_end.back() - iv_begin.back();
        window_buf[i] = iv_buf.back() + (b - iv_begin.back());
    }

    h5::Lock lock;
    const std::string ctx = path + ": read /tokens";
    h5::Handle fspace(h5::check(H5Dget_space(d.tokens.get()), ctx));
    for (size_t k = 0; k < iv_begin.size(); ++k) {
        hsize_t start = iv_begin[k], count = iv_end[k] - iv_begin[k];
        h5::check_status(H5Sselect_hyperslab(fspace.get(), k == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, &start,
                                             nullptr, &count, nullptr),
                         ctx);
    }
    hsize_t n = total;
    h5::Handle mspace(h5::check(H5Screate_simple(1, &n, nullptr), ctx));
    d.scratch.resize(total);
    h5::check_status(H5Dread(d.tokens.get(), H5T_NATIVE_UINT32, mspace.get(), fspace.get(), H5P_DEFAULT,
                             d.scratch.data()),
                     ctx);

    for (size_t k = 0; k < iv_begin.size(); ++k)
        for (uint64_t p = iv_buf[k]; p < iv_buf[k] + (iv_end[k] - iv_begin[k]); ++p)
            if (d.scratch[p] >= static_cast<uint32_t>(limit_vocab))
                throw DataError(path + ": token id " + std::to_string(d.scratch[p]) + " at /tokens[" +
                                std::to_string(iv_begin[k] + (p - iv_buf[k])) + "] is >= vocab_size " +
                                std::to_string(limit_vocab));
    for (size_t i = 0; i < starts.size(); ++i)
        std::copy_n(d.scratch.begin() + window_buf[i], len, out + i * static_cast<size_t>(len));
}

}  // namespace llmtrain
