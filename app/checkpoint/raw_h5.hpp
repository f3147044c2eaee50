// app/checkpoint/raw_h5.hpp — the checkpoint's HDF5 files written in two passes: HDF5 lays the file
// out (groups, contiguous fp32 datasets allocated at creation, `offset` attributes) and closes it;
// then the raw data goes in straight from the caller's host buffers, and the file's SHA-256 is
// computed from those buffers (the few metadata bytes read back) instead of re-reading the file.
// Internal to app/checkpoint/ (write.cpp).
//
// Why (docs/checkpoints.md "Asynchronous checkpoints", figures): through H5Dwrite the writer went in
// 16 MiB calls under HDF5's global lock, then re-read each file to hash it, and reached 0.26 of dd's
// sequential write. Measured on the 2-core build machine (a paravirtualized VM): the kernel's copy
// of a large user buffer into the page cache ran at ~250-300 MB/s (from a 1 MiB buffer in the CPU's
// cache at ~5 GB/s), and it is CPU time the SHA-256 needs. So write_all() rewrites the whole file
// image in 8 MiB blocks with O_DIRECT (the disk takes each block by DMA; four threads keep four
// blocks in flight) while a second thread hashes the same bytes from memory; the ranks' slices
// of model.h5 (app/checkpoint/model_slices.cpp) and file systems that refuse O_DIRECT go through the page cache from a
// 1 MiB buffer, with the kernel's write-back started every 64 MiB. HDF5's lock is held only while the
// structure is made. The result is an ordinary HDF5 1.10 file (the reader opens it like any
// other): each dataset's bytes are the little-endian fp32 values H5Dwrite would have put at the
// same address, and equal tensors give equal files (no timestamps, no fill values).
#pragma once
#include <hdf5.h>
#include <openssl/evp.h>

#include <cstdint>
#include <memory>
#include <filesystem>
#include <string>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"

namespace llmtrain::ckpt {

/// Each pwrite goes from a buffer of this size that stays in the CPU's cache: the data is first
/// copied there (user-space memcpy). pwrite straight from the 1.5 GB snapshot went at ~250 MB/s on
/// the build machine (the kernel's copy from memory not in cache), from a cached 1 MiB at ~5 GB/s.
constexpr size_t kBounce = size_t(1) << 20;

/// SHA-256 (FIPS 180-4) through OpenSSL's EVP interface, fed in pieces. Errors: CheckpointError
/// when OpenSSL fails.
class Sha256 {
public:
    Sha256();
    void update(const void* p, size_t n);
    /// The digest as 64 lowercase hex digits (once).
    std::string hex();

private:
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

/// pwrite of n bytes from data at file offset off of fd, through `bounce` (kBounce bytes), the
/// kernel's write-back started behind every 64 MiB. Errors: CheckpointError "cannot <what> '<file>':
/// <OS reason>".
void pwrite_bounced(int fd, const char* data, uint64_t n, uint64_t off, char* bounce, const std::string& what,
                    const std::string& file);

/// One fp32 dataset of a raw-written file.
struct RawDataset {
    std::string group;            ///< "" = the root group; else a group made before its first dataset
    std::string name;             ///< dataset name inside the group (e.g. "h.0.attn.c_attn.weight")
    std::vector<hsize_t> dims;    ///< shape; prod(dims) > 0
    const float* data = nullptr;  ///< prod(dims) host floats for write_all(); null: structure only
    bool has_offset = false;      ///< with an int64 attribute `offset` (optimizer and weight pieces)
    int64_t offset = 0;           ///< its value
};

/// A checkpoint HDF5 file being written: structure first (constructor), then the raw data.
/// Errors: CheckpointError naming the file, the dataset and the HDF5 or OS reason.
class RawH5File {
public:
    /// Creates path (which must not exist) holding every dataset's structure, and opens it for the
    /// raw data (destroyed without write_all(): the structure alone, for create_model_file). Every fs_op() crash point of the old writer is kept: one at the create, one
    /// before each dataset's data, one at the flush and one at the fsync.
    RawH5File(const std::filesystem::path& path, std::vector<RawDataset> datasets);
    ~RawH5File();
    RawH5File(const RawH5File&) = delete;
    RawH5File& operator=(const RawH5File&) = delete;

    /// Writes every dataset from its RawDataset::data (the whole file image by O_DIRECT where the
    /// file system allows it) while a second thread hashes the image in file order from the same
    /// buffers, then fsyncs and closes the file; returns it as a part (file name, size, SHA-256).
    PartInfo write_all();

private:
    PartInfo finish();  // the SHA-256 completed, fsync, close
    struct Impl;
    Impl* impl_;
};

/// True when every x[0, n) is finite (no NaN, no infinity); a branch-free pass the compiler vectorizes.
bool all_finite(const float* x, size_t n);

}  // namespace llmtrain::ckpt
