// data/h5.hpp — a thin RAII and error layer over the HDF5 1.10 C API, shared by the dataset reader
// and writer. Every failing HDF5 call becomes a DataError whose message names the file, the step
// and HDF5's own innermost reason (e.g. "truncated file: eof = ...", "incorrect metadata checksum").
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

/// Returns id if it is valid, else throws DataError("<context>: <last_error()>").
hid_t check(hid_t id, const std::string& context);
/// Throws DataError("<context>: <last_error()>") if status < 0.
void check_status(herr_t status, const std::string& context);

}  // namespace llmtrain::h5
