// tests/data/test_token_dataset.cpp — the HDF5 token dataset: writer -> reader round trips against
// the closed-form sample (data_test_util.hpp), the uint16/uint32 switch at vocab 65536, the union-
// of-hyperslabs read with overlapping, unsorted and repeated windows, and every bad-file error:
// missing, truncated, corrupted metadata or token bytes, missing/mistyped attributes, wrong
// version, token id >= vocab_size, tokenizer hash mismatch, missing /tokenizer, bad /doc_offsets.
#include <hdf5.h>

#include <cstring>
#include <fstream>
#include <random>

#include "data_test_util.hpp"

using namespace llmtrain;
using namespace llmtrain::test;
namespace fs = std::filesystem;

namespace {

std::vector<int32_t> read_all_tokens(TokenDataset& ds, int limit) {
    std::vector<int32_t> out(ds.info().n_tokens);
    ds.read_windows({0}, static_cast<int>(ds.info().n_tokens), out.data(), limit);
    return out;
}

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// File byte ranges [begin, end) that hold raw data (token chunks, contiguous datasets), so tests
// can tell metadata from data when they corrupt bytes.
std::vector<std::pair<uint64_t, uint64_t>> raw_data_ranges(const std::string& path) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    h5::Lock lock;  // every HDF5 call of the process (data/h5.hpp)
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t tok = H5Dopen2(f, "tokens", H5P_DEFAULT);
    hid_t space = H5Dget_space(tok);
    hsize_t n_chunks = 0;
    H5Dget_num_chunks(tok, space, &n_chunks);
    for (hsize_t i = 0; i < n_chunks; ++i) {
        hsize_t offset = 0, size = 0;
        haddr_t addr = 0;
        unsigned mask = 0;
        H5Dget_chunk_info(tok, space, i, &offset, &mask, &addr, &size);
        ranges.emplace_back(addr, addr + size);
    }
    H5Sclose(space);
    H5Dclose(tok);
    for (const char* name : {"doc_offsets", "tokenizer"}) {
        hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
        ranges.emplace_back(H5Dget_offset(ds), H5Dget_offset(ds) + H5Dget_storage_size(ds));
        H5Dclose(ds);
    }
    H5Fclose(f);
    return ranges;
}

}  // namespace

TEST(TokenDataset, RoundTripMatchesClosedForm) {
    TempDir dir;
    const std::string path = dir.file("a.h5");
    std::string tokenizer(256, '\0');  // every byte value: the bytes must come back unchanged
    for (int i = 0; i < 256; ++i) tokenizer[i] = static_cast<char>(255 - i);
    auto offsets = write_sample(path, 1000, 50, 200, tokenizer);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    TokenDataset ds(path);
    const DatasetInfo& info = ds.info();
    EXPECT_EQ(info.n_tokens, offsets.back());
    EXPECT_EQ(info.n_docs, 50u);
    EXPECT_EQ(info.vocab_size, 1000);
    EXPECT_EQ(info.eos_id, 2);
    EXPECT_EQ(info.bos_id, 1);
    EXPECT_EQ(info.token_bytes, 2);
    EXPECT_EQ(info.format_version, 2);
    EXPECT_EQ(info.tokenizer, "sentencepiece");
    EXPECT_EQ(ds.tokenizer_bytes(), tokenizer);
    EXPECT_EQ(info.tokenizer_sha256, sha256_hex(tokenizer));
    EXPECT_EQ(ds.doc_offsets(), offsets);
    auto all = read_all_tokens(ds, 1000);
    for (uint64_t p = 0; p < all.size(); ++p) ASSERT_EQ(all[p], token_at(p, 1000)) << p;
}

// FIPS 180-2 appendix B.1 and the empty-string digest.
TEST(TokenDataset, Sha256KnownAnswers) {
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

// Overlapping, unsorted and repeated windows in one call, spanning several 2 MiB chunks.
TEST(TokenDataset, ReadWindowsAnyOrderAndOverlap) {
    TempDir dir;
    const std::string path = dir.file("big.h5");
    auto offsets = write_sample(path, 50000, 700, 5000);  // ~1.75M tokens: two uint16 chunks
    TokenDataset ds(path);
    const uint64_t n = offsets.back();
    ASSERT_GT(n, 1u << 20);
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 20; ++trial) {
        const int len = 1 + static_cast<int>(rng() % 300);
        std::vector<uint64_t> starts;
        for (int i = 0; i < 16; ++i) starts.push_back(rng() % (n - len + 1));
        starts.push_back(starts[3]);                       // repeated
        starts.push_back(starts[5] + len / 2);             // overlapping
        starts.push_back(n - len);                         // last window
        starts.push_back(0);                               // first window
        std::vector<int32_t> out(starts.size() * len);
        ds.read_windows(starts, len, out.data(), 50000);
        for (size_t w = 0; w < starts.size(); ++w)
            for (int t = 0; t < len; ++t) ASSERT_EQ(out[w * len + t], token_at(starts[w] + t, 50000));
    }
    std::vector<int32_t> out(10);
    expect_data_error([&] { ds.read_windows({n - 9}, 10, out.data(), 50000); }, {path, "outside /tokens"});
}

// vocab_size <= 65536 stores uint16 (ids up to 65535), above it uint32.
TEST(TokenDataset, DtypeSwitchAt65536) {
    TempDir dir;
    for (int vocab : {65536, 65537, 100000}) {
        const std::string path = dir.file(std::to_string(vocab) + ".h5");
        TokenDatasetWriter w(path, vocab, 0, -1, "tok");
        w.add_document({vocab - 1, 0, 65535, vocab - 2});
        w.finish();
        TokenDataset ds(path);
        EXPECT_EQ(ds.info().token_bytes, vocab <= 65536 ? 2 : 4) << vocab;
        EXPECT_EQ(ds.info().bos_id, -1);
        EXPECT_EQ(read_all_tokens(ds, vocab), (std::vector<int32_t>{vocab - 1, 0, 65535, vocab - 2}));
    }
}

TEST(TokenDataset, EmptyDocumentsAndEmptyFile) {
    TempDir dir;
    const std::string path = dir.file("e.h5");
    TokenDatasetWriter w(path, 10, 2, 1, "tok");
    w.add_document({});
    w.add_document({5});
    w.finish();
    TokenDataset ds(path);
    EXPECT_EQ(ds.doc_offsets(), (std::vector<uint64_t>{0, 0, 1}));
    const std::string empty = dir.file("empty.h5");
    TokenDatasetWriter(empty, 10, 2, 1, "tok").finish();
    EXPECT_EQ(TokenDataset(empty).info().n_tokens, 0u);
}

TEST(TokenDatasetWriter, RejectsBadInputAndLeavesNothingWhenAbandoned) {
    TempDir dir;
    const std::string path = dir.file("w.h5");
    {
        TokenDatasetWriter w(path, 100, 2, 1, "tok");
        expect_data_error([&] { w.add_document({1, 100}); }, {path, "token id 100", "position 1"});
        expect_data_error([&] { w.add_document({-1}); }, {path, "token id -1"});
        EXPECT_TRUE(fs::exists(path + ".tmp"));
    }  // destroyed without finish()
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    expect_data_error([&] { TokenDatasetWriter(path, 100, 100, 1, "tok"); }, {"eos_id 100"});
    expect_data_error([&] { TokenDatasetWriter(path, 100, 2, 1, ""); }, {"tokenizer"});
    expect_data_error([&] { TokenDatasetWriter(dir.file("no/such/dir/x.h5"), 100, 2, 1, "tok"); },
                      {"no/such/dir", "does not exist"});
}

TEST(TokenDatasetErrors, MissingAndNotHdf5) {
    TempDir dir;
    expect_data_error([&] { TokenDataset ds(dir.file("nope.h5")); }, {"nope.h5", "no such dataset file"});
    spit(dir.file("text.h5"), "this is not an HDF5 file\n");
    expect_data_error([&] { TokenDataset ds(dir.file("text.h5")); }, {"text.h5", "not a readable HDF5 file"});
}

// HDF5 records the end-of-allocation in the superblock: any cut is detected at open.
TEST(TokenDatasetErrors, Truncated) {
    TempDir dir;
    const std::string good = dir.file("good.h5");
    write_sample(good, 1000, 100, 300);
    const std::string bytes = slurp(good);
    for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{100}}) {
        const std::string path = dir.file("cut.h5");
        spit(path, bytes.substr(0, keep));
        expect_data_error([&] { TokenDataset ds(path); }, {path, "truncated"});
    }
}

// The V110 file format checksums the superblock, object headers and the chunk index: flipping a
// byte inside any metadata block must fail the open or the read, never yield data.
TEST(TokenDatasetErrors, CorruptedMetadata) {
    TempDir dir;
    const std::string good = dir.file("good.h5");
    write_sample(good, 1000, 700, 5000);  // > 1 chunk: the chunk index is an extensible array
    const std::string bytes = slurp(good);
    const auto data = raw_data_ranges(good);
    auto in_data = [&](size_t pos) {
        for (auto [b, e] : data)
            if (pos >= b && pos < e) return true;
        return false;
    };
    std::vector<size_t> targets{8};  // inside the superblock
    for (const char* sig : {"OHDR", "OCHK", "EAHD", "EAIB", "EADB", "FAHD", "FADB", "BTHD", "BTIN", "BTLF"})
        for (size_t p = bytes.find(sig); p != std::string::npos; p = bytes.find(sig, p + 1))
            if (!in_data(p)) targets.push_back(p + 6);
    ASSERT_GE(targets.size(), 6u);  // superblock, 4 object headers, chunk index
    for (size_t pos : targets) {
        std::string bad = bytes;
        bad[pos] ^= 0x5A;
        const std::string path = dir.file("bad.h5");
        spit(path, bad);
        try {
            TokenDataset ds(path);
            read_all_tokens(ds, 1000);
            ds.doc_offsets();
            ADD_FAILURE() << "corruption at byte " << pos << " went unnoticed";
        } catch (const DataError& e) {
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
            EXPECT_EQ(std::string(e.what()).find("missing"), std::string::npos) << e.what();
        }
    }
}

// Token bytes carry no checksum; the vocab check catches ids that cannot be tokens.
TEST(TokenDatasetErrors, CorruptedTokenBytes) {
    TempDir dir;
    const std::string path = dir.file("t.h5");
    write_sample(path, 1000, 20, 50);
    const auto data = raw_data_ranges(path);
    std::string bytes = slurp(path);
    bytes[data[0].first + 2 * 7] = '\xff';  // token 7's low byte -> id >= 1000 (little-endian uint16)
    bytes[data[0].first + 2 * 7 + 1] = '\xff';
    spit(path, bytes);
    TokenDataset ds(path);
    std::vector<int32_t> out(4);
    ds.read_windows({0}, 4, out.data(), 1000);  // a window without token 7 still reads
    expect_data_error([&] { ds.read_windows({5}, 4, out.data(), 1000); },
                      {path, "token id 65535", "/tokens[7]", "vocab_size 1000"});
}

TEST(TokenDatasetErrors, TokenIdAtLeastVocab) {
    TempDir dir;
    const std::string path = dir.file("t.h5");
    write_sample(path, 1000, 20, 50);
    set_token(path, 11, 1000);
    TokenDataset ds(path);
    std::vector<int32_t> out(12);
    expect_data_error([&] { ds.read_windows({0}, 12, out.data(), 1000); }, {"token id 1000", "/tokens[11]"});
    // A smaller model vocabulary is checked as strictly.
    expect_data_error([&] { ds.read_windows({0}, 11, out.data(), 5); }, {"vocab_size 5"});
}

TEST(TokenDatasetErrors, MissingOrMistypedAttributes) {
    TempDir dir;
    for (const char* attr : {"format_version", "tokenizer", "vocab_size", "eos_id", "bos_id", "tokenizer_sha256"}) {
        const std::string path = dir.file(std::string(attr) + ".h5");
        write_sample(path, 1000, 5, 10);
        mutate(path, [&](hid_t f) { ASSERT_GE(H5Adelete(f, attr), 0); });
        expect_data_error([&] { TokenDataset ds(path); }, {path, "missing attribute", attr});
    }
    const std::string path = dir.file("typed.h5");
    write_sample(path, 1000, 5, 10);
    mutate(path, [](hid_t f) {
        H5Adelete(f, "vocab_size");
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(f, "vocab_size", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        double v = 1000.0;
        H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
        H5Aclose(a);
        H5Sclose(sp);
    });
    expect_data_error([&] { TokenDataset ds(path); }, {path, "'vocab_size' must be a single integer"});
}

// Integer attributes overwritten with values the reader must refuse, each with the words its
// error must hold: a format this build does not read, and a vocab_size the stored dtype cannot hold
// (uint16 tokens and a 70000 vocab).
TEST(TokenDatasetErrors, IntegerAttributesOutOfRange) {
    struct Case {
        const char* attr;
        int64_t value;
        std::vector<std::string> words;
    };
    TempDir dir;
    for (const Case& c : {Case{"format_version", 3, {"format_version 3", "expected 1 or 2"}},
                          Case{"vocab_size", 70000, {"/tokens must be uint32"}}}) {
        SCOPED_TRACE(c.attr);
        const std::string path = dir.file(std::string(c.attr) + ".h5");
        write_sample(path, 1000, 5, 10);
        mutate(path, [&](hid_t f) {
            hid_t a = H5Aopen(f, c.attr, H5P_DEFAULT);
            H5Awrite(a, H5T_NATIVE_INT64, &c.value);
            H5Aclose(a);
        });
        std::vector<std::string> words = c.words;
        words.insert(words.begin(), path);
        expect_data_error([&] { TokenDataset ds(path); }, words);
    }
}

TEST(TokenDataset, TokenizerKindAndVersion1) {
    TempDir dir;
    const std::string v1 = dir.file("v1.h5");
    write_sample(v1, 1000, 5, 10);
    mutate(v1, [](hid_t f) {
        ASSERT_GE(H5Adelete(f, "tokenizer"), 0);
        hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
        int64_t v = 1;
        H5Awrite(a, H5T_NATIVE_INT64, &v);
        H5Aclose(a);
    });
    {
        TokenDataset ds(v1);
        EXPECT_EQ(ds.info().format_version, 1);
        EXPECT_EQ(ds.info().tokenizer, "sentencepiece");
    }
    const std::string g = dir.file("gpt2.h5");
    {
        TokenDatasetWriter w(g, 50257, 50256, -1, "ranks", "gpt2");
        w.add_document({1, 50256});
        w.finish();
    }
    {
        TokenDataset ds(g);
        EXPECT_EQ(ds.info().tokenizer, "gpt2");
        EXPECT_EQ(ds.info().bos_id, -1);
    }
    expect_data_error([&] { TokenDatasetWriter w(dir.file("x.h5"), 10, 2, -1, "t", "wordpiece"); },
                      {"unknown tokenizer kind 'wordpiece'"});
    mutate(g, [](hid_t f) {
        ASSERT_GE(H5Adelete(f, "tokenizer"), 0);
        hid_t type = H5Tcopy(H5T_C_S1);
        H5Tset_size(type, 9);
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(f, "tokenizer", type, sp, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, type, "wordpiece");
        H5Aclose(a);
        H5Sclose(sp);
        H5Tclose(type);
    });
    expect_data_error([&] { TokenDataset ds(g); }, {g, "'tokenizer' is 'wordpiece'"});
}

// /doc_offsets is streamed in chunks of 262,144 entries too: 300,000 documents cross a chunk edge.
TEST(TokenDataset, DocOffsetsAcrossChunks) {
    TempDir dir;
    const std::string path = dir.file("many.h5");
    const uint64_t n = 300'000;
    {
        TokenDatasetWriter w(path, 1000, 2, 1, "tok");
        for (uint64_t d = 0; d < n; ++d) w.add_document(std::vector<int32_t>(1 + d % 3, static_cast<int32_t>(d % 1000)));
        w.finish();
    }
    TokenDataset ds(path);
    auto offs = ds.doc_offsets();
    ASSERT_EQ(offs.size(), n + 1);
    uint64_t at = 0;
    for (uint64_t d = 0; d < n; ++d) {
        ASSERT_EQ(offs[d], at) << d;
        at += 1 + d % 3;
    }
    EXPECT_EQ(offs[n], at);
    EXPECT_EQ(ds.info().n_tokens, at);
}

// append() + end_document() store exactly what add_document() stores, across chunk boundaries,
// and errors count positions from the document's start.
TEST(TokenDataset, StreamingAppendEqualsAddDocument) {
    TempDir dir;
    std::vector<int32_t> doc(3'000'000);
    for (size_t i = 0; i < doc.size(); ++i) doc[i] = static_cast<int32_t>((i * 7919) % 50000);
    const std::string a = dir.file("a.h5"), b = dir.file("b.h5");
    {
        TokenDatasetWriter w(a, 50257, 50256, -1, "t", "gpt2");
        w.add_document({5, 6});
        w.add_document(doc);
        w.finish();
    }
    {
        TokenDatasetWriter w(b, 50257, 50256, -1, "t", "gpt2");
        const int32_t first[] = {5, 6};
        w.append(first, 2);
        w.end_document();
        for (size_t at = 0; at < doc.size(); at += 777'777) w.append(doc.data() + at, std::min<size_t>(777'777, doc.size() - at));
        w.end_document();
        const int32_t bad[] = {1, 2, 60000};
        w.append(bad, 2);
        expect_data_error([&] { w.append(bad, 3); }, {"document 2 position 4", "token id 60000"});
        w.end_document();
        w.finish();
    }
    TokenDataset da(a), db(b);
    EXPECT_EQ(db.doc_offsets(), (std::vector<uint64_t>{0, 2, 2 + doc.size(), 4 + doc.size()}));
    auto ta = read_all_tokens(da, 50257), tb = read_all_tokens(db, 50257);
    tb.resize(ta.size());
    EXPECT_EQ(ta, tb);
}

TEST(TokenDatasetErrors, TokenizerHashMismatch) {
    TempDir dir;
    const std::string path = dir.file("h.h5");
    write_sample(path, 1000, 5, 10);
    mutate(path, [](hid_t f) {
        hid_t a = H5Aopen(f, "tokenizer_sha256", H5P_DEFAULT);
        hid_t t = H5Aget_type(a);
        std::string other = sha256_hex("another tokenizer");
        H5Awrite(a, t, other.data());
        H5Tclose(t);
        H5Aclose(a);
    });
    expect_data_error([&] { TokenDataset ds(path); }, {path, "/tokenizer has SHA-256", sha256_hex("another tokenizer")});
}

TEST(TokenDatasetErrors, MissingDatasets) {
    TempDir dir;
    for (const char* name : {"tokenizer", "tokens", "doc_offsets"}) {
        const std::string path = dir.file(std::string(name) + ".h5");
        write_sample(path, 1000, 5, 10);
        mutate(path, [&](hid_t f) { ASSERT_GE(H5Ldelete(f, name, H5P_DEFAULT), 0); });
        expect_data_error([&] { TokenDataset ds(path); }, {path, std::string("missing dataset ") + name});
    }
}

TEST(TokenDatasetErrors, DocOffsetsInconsistent) {
    TempDir dir;
    const std::string path = dir.file("o.h5");
    write_sample(path, 1000, 5, 10);
    mutate(path, [](hid_t f) {
        hid_t ds = H5Dopen2(f, "doc_offsets", H5P_DEFAULT);
        std::vector<uint64_t> offs(6, 0);
        H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offs.data());
        offs[5] += 1;  // past the end of /tokens
        H5Dwrite(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offs.data());
        H5Dclose(ds);
    });
    expect_data_error([&] { TokenDataset ds(path); }, {path, "/doc_offsets must"});
}
