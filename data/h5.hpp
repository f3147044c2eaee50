// data/h5.hpp — a thin RAII and error layer over the HDF5 1.10 C API, shared by the dataset reader
// and writer and by app/'s checkpoints. Every failing HDF5 call becomes an exception (DataError
// unless the caller names another type) whose message names the file, the step and HDF5's own
// innermost reason (e.g. "truncated file: eof = ...", "incorrect metadata checksum"). Also the one
// fsync helper: HDF5 closes files without fsync, so writers that must survive a crash call it.
#pragma once
#include <hdf5.h>

#include <string>

#include "data/token_dataset.hpp"

namespace llmtrain::h5 {

/// Owns one HDF5 identifier (file, dataset, dataspace, type, property list, attribute) and closes it
/// with H5Idec_ref, which works for every identifier kind. Move-only.
class Handle {
public:
    Handle() = default;
    explicit Handle(hid_t id) : id_(id) {}
    Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
    Handle& operator=(Handle&& o) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { reset(); }
    hid_t get() const { return id_; }
    bool valid() const { return id_ >= 0; }
    void reset();

private:
    hid_t id_ = H5I_INVALID_HID;
};

/// While alive, HDF5 prints no error stacks on this thread (the stack is per-thread in the
/// thread-safe build); the previous printing handler is restored on destruction.
class QuietErrors {
public:
    QuietErrors();
    ~QuietErrors();
    QuietErrors(const QuietErrors&) = delete;
    QuietErrors& operator=(const QuietErrors&) = delete;

private:
    H5E_auto2_t func_ = nullptr;
    void* data_ = nullptr;
};

/// The innermost description on this thread's HDF5 error stack ("" if empty).
std::string last_error();

/// Returns id if it is valid, else throws E("<context>: <last_error()>").
template <class E = DataError>
hid_t check(hid_t id, const std::string& context) {
    if (id < 0) throw E(context + ": " + last_error());
    return id;
}
/// Throws E("<context>: <last_error()>") if status < 0.
template <class E = DataError>
void check_status(herr_t status, const std::string& context) {
    if (status < 0) throw E(context + ": " + last_error());
}

/// fsync(2) of a file or directory by path (a directory: so that its entries, e.g. a rename, reach
/// the disk). Returns "" on success, else the OS reason ("open: No such file or directory").
std::string try_fsync(const std::string& path);
/// try_fsync, throwing E("cannot fsync '<path>': <reason>") on failure.
template <class E = DataError>
void fsync_path(const std::string& path) {
    const std::string why = try_fsync(path);
    if (!why.empty()) throw E("cannot fsync '" + path + "': " + why);
}

}  // namespace llmtrain::h5
