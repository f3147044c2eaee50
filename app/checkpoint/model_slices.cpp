// app/checkpoint/model_slices.cpp — model.h5 written by every writing rank at once: rank 0 lays the
// file out at the start of a checkpoint (HDF5 makes the structure, each tensor's data space
// allocated, nothing written), each writing rank pwrites its own weights into their tensors' data
// and hashes each piece from memory, and rank 0's commit only checks the reported slices and hashes
// the few KiB of metadata no rank wrote. No rank reads or hashes the whole file: rank 0's commit
// was that serial work before (assembling model.h5 from per-rank part files: 4 s for GPT-2 124M on
// the build machine, minutes for Llama 3 8B) while every other rank waited under
// parallel.timeout_s (docs/checkpoints.md "Who does what at a commit").
//
// The bytes are those a single writer makes (same structure, same data at the same addresses), so
// model.h5 stays an ordinary HDF5 file; only its checksum in state.toml is a list of slices.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>

#include "app/checkpoint/checkpoint.hpp"
#include "app/checkpoint/format.hpp"
#include "data/h5.hpp"

namespace llmtrain {

using namespace ckpt;

namespace {

CheckpointError os_error(const std::string& what, const std::string& file) {
    return CheckpointError("checkpoint: cannot " + what + " '" + file + "': " + std::strerror(errno));
}

/// The file address of each layout tensor's contiguous data in `file` (index = layout tensor index),
/// read back through HDF5. Errors: CheckpointError when a tensor is missing or has no address.
std::vector<uint64_t> data_addresses(const std::string& file, const ParamLayout& layout) {
    h5::Lock lock;  // a few HDF5 calls: open, one per tensor
    h5::Handle f(h5::check<CheckpointError>(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT),
                                            "checkpoint: cannot open " + file));
    std::vector<uint64_t> addr;
    for (const auto& t : layout.tensors()) {
        h5::Handle ds(h5::check<CheckpointError>(H5Dopen2(f.get(), t.name.c_str(), H5P_DEFAULT),
                                                 file + ": cannot open dataset " + t.name));
        const haddr_t a = H5Dget_offset(ds.get());
        if (a == HADDR_UNDEF) throw CheckpointError(file + ": dataset " + t.name + " has no data address");
        addr.push_back(uint64_t(a));
    }
    return addr;
}

/// SHA-256 of the file's bytes [lo, hi), read with pread. Errors: CheckpointError on a read error
/// or a file shorter than hi.
std::string hash_range(int fd, uint64_t lo, uint64_t hi, const std::string& file) {
    Sha256 h;
    std::vector<char> buf(size_t(std::min<uint64_t>(hi - lo, uint64_t(4) << 20)));
    while (lo < hi) {
        const ssize_t r = ::pread(fd, buf.data(), size_t(std::min<uint64_t>(hi - lo, buf.size())), off_t(lo));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw os_error("read", file);
        if (r == 0) throw CheckpointError("checkpoint: '" + file + "' ends before byte " + std::to_string(hi));
        h.update(buf.data(), size_t(r));
        lo += uint64_t(r);
    }
    return h.hex();
}

}  // namespace

void create_model_file(const std::string& tmp_dir, const ParamLayout& layout) {
    RawH5File(fs::path(tmp_dir) / "model.h5", model_datasets(layout));  // structure only; closed unsynced
}

PartInfo write_model_slices(const std::string& tmp_dir, const ParamLayout& layout,
                            const std::vector<OptimShardView>& views) {
    const std::string file = (fs::path(tmp_dir) / "model.h5").string();
    const std::vector<uint64_t> addr = data_addresses(file, layout);
    struct Piece {
        uint64_t at, bytes;  // file offset and size
        const float* src;
    };
    std::vector<Piece> pieces;
    const auto& ts = layout.tensors();
    for (size_t i = 0; i < ts.size(); ++i)
        for (const OptimShardView& s : views) {
            const size_t lo = std::max(ts[i].offset, s.begin), hi = std::min(ts[i].offset + ts[i].numel, s.end);
            if (lo >= hi) continue;
            if (!s.w) throw CheckpointError(file + ": no weights given for " + ts[i].name);
            const float* src = s.w + (lo - s.begin);
            require_finite(src, hi - lo, ts[i].name);
            pieces.push_back({addr[i] + (lo - ts[i].offset) * sizeof(float), (hi - lo) * sizeof(float), src});
        }
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.at < b.at; });
    PartInfo info{"model.h5", 0, kSlicedSha, {}};
    info.slices.resize(pieces.size());
    // The hashes come from memory on a second thread while the pwrites go on (as RawH5File's).
    std::exception_ptr hash_error;
    std::thread hasher([&] {
        try {
            for (size_t j = 0; j < pieces.size(); ++j) {
                Sha256 h;
                h.update(pieces[j].src, pieces[j].bytes);
                info.slices[j] = {pieces[j].at, pieces[j].at + pieces[j].bytes, h.hex()};
            }
        } catch (...) {
            hash_error = std::current_exception();
        }
    });
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    try {
        if (fd < 0) throw os_error("open for writing", file);
        std::vector<char> bounce(kBounce);
        for (const Piece& p : pieces) {
            fs_op();
            pwrite_bounced(fd, reinterpret_cast<const char*>(p.src), p.bytes, p.at, bounce.data(), "write a slice of", file);
            info.bytes += p.bytes;
        }
        fs_op();
        if (::fsync(fd) != 0) throw os_error("fsync", file);
    } catch (...) {
        if (fd >= 0) ::close(fd);
        hasher.join();
        throw;
    }
    hasher.join();
    if (::close(fd) != 0) throw os_error("close", file);
    if (hash_error) std::rethrow_exception(hash_error);
    return info;
}

PartInfo seal_model_slices(const std::string& tmp_dir, const ParamLayout& layout, std::vector<ByteSlice> slices) {
    const std::string file = (fs::path(tmp_dir) / "model.h5").string();
    const std::vector<uint64_t> addr = data_addresses(file, layout);
    // Every tensor's data extent, ascending: each slice must lie inside one, and together they
    // must cover them all exactly (no overlap, no byte of a tensor left unwritten).
    std::vector<std::pair<uint64_t, uint64_t>> tensors;
    uint64_t tensor_bytes = 0;
    for (size_t i = 0; i < addr.size(); ++i) {
        tensors.push_back({addr[i], addr[i] + layout.tensors()[i].numel * sizeof(float)});
        tensor_bytes += layout.tensors()[i].numel * sizeof(float);
    }
    std::sort(tensors.begin(), tensors.end());
    std::sort(slices.begin(), slices.end(), [](const ByteSlice& a, const ByteSlice& b) { return a.lo < b.lo; });
    uint64_t written = 0;
    for (size_t j = 0; j < slices.size(); ++j) {
        const ByteSlice& s = slices[j];
        auto t = std::upper_bound(tensors.begin(), tensors.end(), std::make_pair(s.lo, ~uint64_t(0)));
        if (s.lo >= s.hi || t == tensors.begin() || s.hi > std::prev(t)->second)
            throw CheckpointError("checkpoint: " + file + ": a rank reported bytes [" + std::to_string(s.lo) + ", " +
                                  std::to_string(s.hi) + ") outside every tensor's data");
        if (j > 0 && slices[j - 1].hi > s.lo)
            throw CheckpointError("checkpoint: " + file + ": two ranks wrote bytes [" + std::to_string(s.lo) + ", " +
                                  std::to_string(slices[j - 1].hi) + ") (overlapping slices)");
        written += s.hi - s.lo;
    }
    if (written != tensor_bytes)
        throw CheckpointError("checkpoint: " + file + ": the ranks wrote " + std::to_string(written) + " bytes of " +
                              std::to_string(tensor_bytes) + " bytes of tensor data (a part is missing)");
    const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw os_error("open", file);
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    const off_t end = ::lseek(fd, 0, SEEK_END);
    if (end < 0) throw os_error("seek in", file);
    // The gaps between the slices (HDF5's structure) hashed from the file: the slices then tile it.
    std::vector<ByteSlice> all;
    uint64_t at = 0;
    for (ByteSlice& s : slices) {
        if (at < s.lo) all.push_back({at, s.lo, hash_range(fd, at, s.lo, file)});
        at = s.hi;
        all.push_back(std::move(s));
    }
    if (at > uint64_t(end)) throw CheckpointError("checkpoint: " + file + " is shorter than the slices written into it");
    if (at < uint64_t(end)) all.push_back({at, uint64_t(end), hash_range(fd, at, uint64_t(end), file)});
    fs_op();
    if (::fsync(fd) != 0) throw os_error("fsync", file);
    return PartInfo{"model.h5", uint64_t(end), kSlicedSha, std::move(all)};
}

}  // namespace llmtrain
