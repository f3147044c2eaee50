// app/checkpoint/raw_h5.cpp — checkpoint HDF5 files: structure by HDF5, raw data by pwrite, SHA-256
// from the caller's buffers (see raw_h5.hpp).
#include "app/checkpoint/raw_h5.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>

#include "app/checkpoint/format.hpp"
#include "data/h5.hpp"

namespace llmtrain::ckpt {

namespace {

/// write_all()'s O_DIRECT blocks: their size, and the alignment of their address, file offset and
/// length (4 KiB covers every logical block size Linux disks use).
constexpr size_t kImageBlock = size_t(8) << 20;
constexpr size_t kAlign = 4096;
/// Threads writing one file's O_DIRECT blocks at once (each waits for the disk).
constexpr int kWriters = 4;
/// The kernel's write-back is started behind every kWriteChunk bytes written.
constexpr size_t kWriteChunk = size_t(64) << 20;
/// The read buffer for the metadata between datasets (and the whole file when hashing from disk).
constexpr size_t kReadChunk = size_t(4) << 20;

CheckpointError os_error(const std::string& what, const std::string& file) {
    return CheckpointError("checkpoint: cannot " + what + " '" + file + "': " + std::strerror(errno));
}

hid_t h5c(hid_t id, const std::string& context) { return h5::check<CheckpointError>(id, context); }
void h5s(herr_t status, const std::string& context) { h5::check_status<CheckpointError>(status, context); }

/// A property list of class cls without object modification times (equal tensors, equal bytes).
h5::Handle untimed(hid_t cls, const std::string& file) {
    h5::Handle p(h5c(H5Pcreate(cls), file + ": cannot create a property list"));
    h5s(H5Pset_obj_track_times(p.get(), false), file + ": cannot turn off object timestamps");
    return p;
}

}  // namespace

bool all_finite(const float* x, size_t n) {
    uint32_t bad = 0;  // exponent bits all ones: an infinity or a NaN
    for (size_t i = 0; i < n; ++i) {
        uint32_t b;
        std::memcpy(&b, x + i, sizeof b);
        bad |= uint32_t((b & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
        throw CheckpointError("checkpoint: OpenSSL SHA-256 failed");
}

void Sha256::update(const void* p, size_t n) {
    if (n > 0 && EVP_DigestUpdate(ctx_.get(), p, n) != 1) throw CheckpointError("checkpoint: OpenSSL SHA-256 failed");
}

std::string Sha256::hex() {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), d, &len) != 1) throw CheckpointError("checkpoint: OpenSSL SHA-256 failed");
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
        out += digits[d[i] >> 4];
        out += digits[d[i] & 15];
    }
    return out;
}

void pwrite_bounced(int fd, const char* data, uint64_t n, uint64_t off, char* bounce, const std::string& what,
                    const std::string& file) {
    uint64_t started = 0;  // bytes whose write-back has been started
    for (uint64_t done = 0; done < n;) {
        const size_t m = size_t(std::min<uint64_t>(n - done, kBounce));
        std::memcpy(bounce, data + done, m);
        for (size_t put = 0; put < m;) {
            const ssize_t w = ::pwrite(fd, bounce + put, m - put, off_t(off + done + put));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) throw os_error(what, file);
            put += size_t(w);
        }
        done += m;
        if (done - started >= kWriteChunk || done == n) {
            // Only a hint (errors surface at the fsync): the disk starts on these pages now.
            ::sync_file_range(fd, off_t(off + started), off_t(done - started), SYNC_FILE_RANGE_WRITE);
            started = done;
        }
    }
}

struct RawH5File::Impl {
    fs::path path;
    std::string file;
    std::vector<RawDataset> ds;
    std::vector<uint64_t> addr;   // file address of dataset i's raw data
    std::vector<uint64_t> bytes;  // its size
    std::vector<size_t> order;    // dataset indices by address
    int fd = -1;
    // The SHA-256 so far: the file's bytes [0, hashed_to), through dataset order[next - 1].
    Sha256 sha;
    uint64_t hashed_to = 0;
    size_t next = 0;

    /// Feeds the file's bytes [lo, hi) as they are on disk into h.
    void hash_from_file(Sha256& h, uint64_t lo, uint64_t hi) const {
        std::vector<char> buf(size_t(std::min<uint64_t>(hi - lo, kReadChunk)));
        while (lo < hi) {
            const ssize_t r = ::pread(fd, buf.data(), size_t(std::min<uint64_t>(hi - lo, buf.size())), off_t(lo));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) throw os_error("read back", file);
            if (r == 0) throw CheckpointError("checkpoint: '" + file + "' is shorter than its datasets (read back)");
            h.update(buf.data(), size_t(r));
            lo += uint64_t(r);
        }
    }

    /// Dataset order[next] with its data: the metadata before it from the file, then its bytes.
    void hash_next(Sha256& h, const float* data) {
        const size_t i = order[next++];
        hash_from_file(h, hashed_to, addr[i]);
        h.update(data, bytes[i]);
        hashed_to = addr[i] + bytes[i];
    }

    /// pwrite of dataset i's bytes through `bounce` (kBounce bytes).
    void write_data(size_t i, const float* data, char* bounce) {
        fs_op();
        pwrite_bounced(fd, reinterpret_cast<const char*>(data), bytes[i], addr[i], bounce,
                       "write dataset " + ds[i].group + "/" + ds[i].name + " of", file);
    }

    /// The whole file, [0, max(EOF, the datasets' end)), rewritten in kImageBlock blocks with
    /// O_DIRECT: each block composed in an aligned buffer from the datasets' data (write_all's
    /// buffers) and the metadata HDF5 wrote (read back), the last one padded to the alignment and
    /// the file cut back after. The disk takes the data from this buffer by DMA: no copy into the
    /// page cache, whose CPU time on the 2-core build machine was what the writer lacked beside its
    /// SHA-256. Returns false, having written nothing, where O_DIRECT is refused (tmpfs, some
    /// network file systems): the caller writes through the page cache instead.
    bool write_image() {
        const int dfd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
        if (dfd < 0) return false;
        struct Closer {
            int fd;
            ~Closer() { ::close(fd); }
        } closer{dfd};
        struct stat sb {};
        if (::fstat(fd, &sb) != 0) throw os_error("stat", file);
        uint64_t end = uint64_t(sb.st_size);
        for (size_t i = 0; i < ds.size(); ++i) end = std::max(end, addr[i] + bytes[i]);
        // The file as segments in order: a dataset's bytes (from its buffer) or what HDF5 wrote
        // between them (read back; only these few bytes go through a read).
        struct Seg {
            uint64_t lo, hi;
            const char* src;  // null: from the file
        };
        std::vector<Seg> segs;
        uint64_t at = 0;
        for (size_t i : order) {
            if (at < addr[i]) segs.push_back({at, addr[i], nullptr});
            segs.push_back({addr[i], addr[i] + bytes[i], reinterpret_cast<const char*>(ds[i].data)});
            at = addr[i] + bytes[i];
        }
        if (at < end) segs.push_back({at, end, nullptr});
        const uint64_t nblocks = (end + kImageBlock - 1) / kImageBlock;
        // Block b into buf and onto the disk; false when O_DIRECT refuses it (EINVAL).
        auto put_block = [&](uint64_t b, char* buf) {
            const uint64_t off = b * kImageBlock, hi = std::min(end, off + kImageBlock);
            auto k = std::upper_bound(segs.begin(), segs.end(), off, [](uint64_t x, const Seg& g) { return x < g.hi; });
            for (; k != segs.end() && k->lo < hi; ++k) {
                const uint64_t lo = std::max(off, k->lo), top = std::min(hi, k->hi);
                char* dst = buf + (lo - off);
                if (k->src) {
                    if (lo == k->lo) fs_op();  // the crash test's point before each dataset
                    std::memcpy(dst, k->src + (lo - k->lo), size_t(top - lo));
                    continue;
                }
                for (uint64_t p = lo; p < top;) {
                    const ssize_t r = ::pread(fd, dst + (p - lo), size_t(top - p), off_t(p));
                    if (r < 0 && errno == EINTR) continue;
                    if (r < 0) throw os_error("read back", file);
                    if (r == 0) {  // past HDF5's EOF
                        std::memset(dst + (p - lo), 0, size_t(top - p));
                        break;
                    }
                    p += uint64_t(r);
                }
            }
            const size_t len = size_t(hi - off), padded = (len + kAlign - 1) / kAlign * kAlign;
            std::memset(buf + len, 0, padded - len);
            for (size_t put = 0; put < padded;) {
                const ssize_t w = ::pwrite(dfd, buf + put, padded - put, off_t(off + put));
                if (w < 0 && errno == EINTR) continue;
                if (w < 0 && b == 0 && put == 0 && errno == EINVAL) return false;
                if (w <= 0) throw os_error("write", file);
                put += size_t(w);
            }
            return true;
        };
        // kWriters threads, each with its own buffer, take blocks in turn: O_DIRECT writes wait
        // for the disk, so several keep it busy (one at a time reached a third of dd).
        std::vector<std::unique_ptr<char, decltype(&std::free)>> bufs;
        for (int t = 0; t < kWriters; ++t) {
            bufs.emplace_back(static_cast<char*>(std::aligned_alloc(kAlign, kImageBlock)), std::free);
            if (!bufs.back()) throw CheckpointError("checkpoint: " + file + ": no memory for the write buffers");
        }
        if (!put_block(0, bufs[0].get())) return false;  // O_DIRECT not for this file
        std::atomic<uint64_t> next_block{1};
        std::vector<std::exception_ptr> errors(static_cast<size_t>(kWriters));
        std::vector<std::thread> writers;
        for (int t = 0; t < kWriters; ++t)
            writers.emplace_back([&, t] {
                try {
                    for (uint64_t b; (b = next_block++) < nblocks;) put_block(b, bufs[size_t(t)].get());
                } catch (...) {
                    errors[size_t(t)] = std::current_exception();
                    next_block = nblocks;  // the others stop too
                }
            });
        for (auto& w : writers) w.join();
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
        if (end % kAlign != 0 && ::ftruncate(fd, off_t(end)) != 0) throw os_error("truncate", file);
        return true;
    }
};

RawH5File::RawH5File(const fs::path& path, std::vector<RawDataset> datasets) : impl_(new Impl) {
    std::unique_ptr<Impl> owner(impl_);
    Impl& I = *impl_;
    I.path = path;
    I.file = path.string();
    I.ds = std::move(datasets);
    const size_t n = I.ds.size();
    I.addr.resize(n);
    I.bytes.resize(n);
    {
        h5::Lock lock;
        const std::string& file = I.file;
        fs_op();
        h5::Handle f(h5c(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), "checkpoint: cannot create " + file));
        h5::Handle gcpl = untimed(H5P_GROUP_CREATE, file);
        // Contiguous, its space allocated at creation (so its address is known now), never filled:
        // HDF5 writes no byte of the data region, the pwrites below write all of it.
        h5::Handle dcpl = untimed(H5P_DATASET_CREATE, file);
        h5s(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), file + ": cannot set a contiguous layout");
        h5s(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), file + ": cannot set early allocation");
        h5s(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), file + ": cannot turn off fill values");
        h5::Handle scalar(h5c(H5Screate(H5S_SCALAR), file + ": scalar dataspace"));
        std::vector<std::pair<std::string, h5::Handle>> groups;
        for (size_t i = 0; i < n; ++i) {
            const RawDataset& d = I.ds[i];
            hid_t loc = f.get();
            if (!d.group.empty()) {
                auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == d.group; });
                if (g == groups.end()) {
                    groups.emplace_back(d.group, h5::Handle(h5c(H5Gcreate2(f.get(), d.group.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                                                                file + ": cannot create group " + d.group)));
                    g = groups.end() - 1;
                }
                loc = g->second.get();
            }
            const std::string what = file + ": dataset " + (d.group.empty() ? "" : d.group + "/") + d.name;
            uint64_t numel = 1;
            for (hsize_t x : d.dims) numel *= x;
            if (d.dims.empty() || numel == 0) throw CheckpointError(what + ": empty shape");
            h5::Handle space(h5c(H5Screate_simple(int(d.dims.size()), d.dims.data(), nullptr), what + ": dataspace"));
            h5::Handle dset(h5c(H5Dcreate2(loc, d.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                what + ": cannot create it"));
            const haddr_t a = H5Dget_offset(dset.get());
            if (a == HADDR_UNDEF) throw CheckpointError(what + ": HDF5 gave no address for its data");
            I.addr[i] = uint64_t(a);
            I.bytes[i] = numel * sizeof(float);
            if (d.has_offset) {
                h5::Handle at(h5c(H5Acreate2(dset.get(), "offset", H5T_STD_I64LE, scalar.get(), H5P_DEFAULT, H5P_DEFAULT),
                                  what + ": cannot create attribute offset"));
                h5s(H5Awrite(at.get(), H5T_NATIVE_INT64, &d.offset), what + ": cannot write attribute offset");
            }
        }
        fs_op();
        h5s(H5Fflush(f.get(), H5F_SCOPE_GLOBAL), "checkpoint: cannot flush " + file);
    }  // every handle closed: HDF5 has written the whole structure
    I.order.resize(n);
    for (size_t i = 0; i < n; ++i) I.order[i] = i;
    std::sort(I.order.begin(), I.order.end(), [&](size_t a, size_t b) { return I.addr[a] < I.addr[b]; });
    for (size_t j = 1; j < n; ++j)
        if (I.addr[I.order[j - 1]] + I.bytes[I.order[j - 1]] > I.addr[I.order[j]])
            throw CheckpointError("checkpoint: " + I.file + ": HDF5 placed two datasets' data over each other");
    I.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (I.fd < 0) throw os_error("open for writing", I.file);
    owner.release();
}

RawH5File::~RawH5File() {
    if (impl_->fd >= 0) ::close(impl_->fd);
    delete impl_;
}

PartInfo RawH5File::finish() {
    Impl& I = *impl_;
    struct stat sb {};
    if (::fstat(I.fd, &sb) != 0) throw os_error("stat", I.file);
    const uint64_t size = uint64_t(sb.st_size);
    I.hash_from_file(I.sha, I.hashed_to, size);  // the rest after the last dataset
    const std::string sha = I.sha.hex();
    fs_op();
    if (::fsync(I.fd) != 0) throw os_error("fsync", I.file);
    const int fd = I.fd;
    I.fd = -1;
    if (::close(fd) != 0) throw os_error("close", I.file);
    return PartInfo{I.path.filename().string(), size, sha, {}};
}

PartInfo RawH5File::write_all() {
    Impl& I = *impl_;
    for (const RawDataset& d : I.ds)
        if (!d.data) throw CheckpointError("checkpoint: " + I.file + ": no data given for " + d.group + "/" + d.name);
    // The hash needs only the buffers and the metadata HDF5 already wrote, not the writes: it runs
    // beside them (the O_DIRECT writers mostly wait for the disk).
    std::exception_ptr hash_error;
    std::thread hasher([&] {
        try {
            while (I.next < I.order.size()) I.hash_next(I.sha, I.ds[I.order[I.next]].data);
        } catch (...) {
            hash_error = std::current_exception();
        }
    });
    try {
        if (!I.write_image()) {
            std::vector<char> bounce(kBounce);
            for (size_t i : I.order) I.write_data(i, I.ds[i].data, bounce.data());
        }
    } catch (...) {
        hasher.join();
        throw;
    }
    hasher.join();
    if (hash_error) std::rethrow_exception(hash_error);
    return finish();
}

}  // namespace llmtrain::ckpt
