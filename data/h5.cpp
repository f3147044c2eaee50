// data/h5.cpp — HDF5 identifier ownership, error-stack capture and fsync (see h5.hpp).
#include "data/h5.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace llmtrain::h5 {

Handle& Handle::operator=(Handle&& o) noexcept {
    if (this != &o) {
        reset();
        id_ = o.id_;
        o.id_ = H5I_INVALID_HID;
    }
    return *this;
}

void Handle::reset() {
    if (id_ >= 0) H5Idec_ref(id_);
    id_ = H5I_INVALID_HID;
}

// HDF5 1.10 leaks internal state after some failed opens (truncated file, checksum mismatch) and,
// at exit, prints "HDF5: infinite loop closing library" plus a line of interface names unless
// error printing is off. This handler turns printing off at exit; registered after HDF5's own
// (the H5Eget_auto2 call below initializes the library first), it runs before it.
static void quiet_at_exit() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

QuietErrors::QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    static std::once_flag registered;
    std::call_once(registered, [] { std::atexit(quiet_at_exit); });
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

// The walk goes from the API call down to the function that failed first; the last record
// holds the most specific reason.
static herr_t keep_innermost(unsigned, const H5E_error2_t* err, void* out) {
    if (err->desc && err->desc[0]) *static_cast<std::string*>(out) = err->desc;
    return 0;
}

std::string last_error() {
    std::string desc;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &desc);
    return desc.empty() ? "unknown HDF5 error" : desc;
}

std::string try_fsync(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::string("open: ") + std::strerror(errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    return rc == 0 ? std::string() : std::string("fsync: ") + std::strerror(err);
}

}  // namespace llmtrain::h5
