// data/h5.cpp — the process-wide HDF5 lock, identifier ownership, error-stack capture and fsync
// (see h5.hpp).
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
    if (id_ < 0) return;
    Lock lock;
    // H5Idec_ref, like every API call, clears the error stack on entry: a pending error (a failed
    // call whose handles close before its check reads it) is set aside and put back.
    const hid_t pending = H5Eget_num(H5E_DEFAULT) > 0 ? H5Eget_current_stack() : H5I_INVALID_HID;
    H5Idec_ref(id_);
    if (pending >= 0) H5Eset_current_stack(pending);
    id_ = H5I_INVALID_HID;
}

std::recursive_mutex& mutex() {
    static std::recursive_mutex m;  // a function-local static: ready for HDF5 use in other statics
    return m;
}

namespace {

// Per thread: Locks held (nesting), the printing handler the outermost one replaced, and the
// error description its release kept.
thread_local int t_depth = 0;
thread_local H5E_auto2_t t_func = nullptr;
thread_local void* t_data = nullptr;
thread_local std::string t_kept;

// The walk goes from the API call down to the function that failed first; the last record
// holds the most specific reason.
herr_t keep_innermost(unsigned, const H5E_error2_t* err, void* out) {
    if (err->desc && err->desc[0]) *static_cast<std::string*>(out) = err->desc;
    return 0;
}

std::string innermost() {
    std::string desc;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &desc);
    return desc;
}

// HDF5 1.10 leaks internal state after some failed opens (truncated file, checksum mismatch) and,
// at exit, prints "HDF5: infinite loop closing library" plus a line of interface names unless
// error printing is off. This handler turns printing off at exit; registered after HDF5's own
// (the H5Eget_auto2 call before it initializes the library first), it runs before it.
void quiet_at_exit() {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

}  // namespace

Lock::Lock() {
    mutex().lock();
    if (t_depth++ > 0) return;
    H5Eget_auto2(H5E_DEFAULT, &t_func, &t_data);
    static std::once_flag registered;
    std::call_once(registered, [] { std::atexit(quiet_at_exit); });
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Lock::~Lock() {
    if (--t_depth == 0) {
        t_kept = innermost();
        H5Eset_auto2(H5E_DEFAULT, t_func, t_data);
    }
    mutex().unlock();
}

std::string last_error() {
    const std::string desc = t_depth > 0 ? innermost() : t_kept;
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
