// tests/data/data_test_util.hpp — shared fixtures of the data tests: a scratch directory and a
// dataset whose token at global position p is the closed-form value token_at(p, vocab), so every
// read can be checked without trusting the writer.
#pragma once
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/h5.hpp"
#include "data/token_dataset.hpp"

namespace llmtrain::test {

/// A fresh directory under the system temp dir, removed with its contents at destruction.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        static int counter = 0;
        path = std::filesystem::temp_directory_path() /
               ("llmtrain_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::string file(const std::string& name) const { return (path / name).string(); }
};

/// Token at global position p of a sample dataset: a fixed hash of p reduced into [0, vocab).
inline int32_t token_at(uint64_t p, int vocab) { return static_cast<int32_t>((p * 2654435761ull + 17) % vocab); }

/// Writes n_docs documents of lengths 1 + (d * 37) % max_len with tokens token_at(position),
/// returns the document offsets (n_docs + 1).
inline std::vector<uint64_t> write_sample(const std::string& path, int vocab, int n_docs, int max_len,
                                          const std::string& tokenizer = "sample tokenizer bytes") {
    TokenDatasetWriter w(path, vocab, /*eos_id=*/vocab > 2 ? 2 : 0, /*bos_id=*/vocab > 1 ? 1 : -1, tokenizer);
    std::vector<uint64_t> offsets{0};
    for (int d = 0; d < n_docs; ++d) {
        std::vector<int32_t> doc(1 + (static_cast<uint64_t>(d) * 37) % max_len);
        for (size_t i = 0; i < doc.size(); ++i) doc[i] = token_at(offsets.back() + i, vocab);
        w.add_document(doc);
        offsets.push_back(offsets.back() + doc.size());
    }
    w.finish();
    return offsets;
}

/// Opens `path` read-write with the raw HDF5 API, runs fn(file), closes: how tests break files
/// in ways the writer refuses to.
template <class Fn>
void mutate(const std::string& path, Fn&& fn) {
    llmtrain::h5::Lock lock;  // every HDF5 call of the process (data/h5.hpp)
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    fn(f);
    ASSERT_GE(H5Fclose(f), 0);
}

/// Overwrites /tokens[pos] with `value` (any uint32, so also ids >= vocab_size).
inline void set_token(const std::string& path, uint64_t pos, uint32_t value) {
    mutate(path, [&](hid_t f) {
        hid_t ds = H5Dopen2(f, "tokens", H5P_DEFAULT);
        hid_t fs = H5Dget_space(ds);
        hsize_t start = pos, count = 1;
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
        hid_t ms = H5Screate_simple(1, &count, nullptr);
        EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_UINT32, ms, fs, H5P_DEFAULT, &value), 0);
        H5Sclose(ms);
        H5Sclose(fs);
        H5Dclose(ds);
    });
}

/// Runs `fn`, expects a DataError, and checks its message contains every string of `parts`.
template <class Fn>
void expect_data_error(Fn&& fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "expected DataError containing '" << (parts.empty() ? "" : parts[0]) << "'";
    } catch (const DataError& e) {
        for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
}

}  // namespace llmtrain::test
