// data/h5.hpp — a thin RAII, locking and error layer over the HDF5 1.10 C API, shared by the dataset
// reader and writer and by app/'s checkpoints. Every failing HDF5 call becomes an exception
// (DataError unless the caller names another type) whose message names the file, the step and
// HDF5's own innermost reason (e.g. "truncated file: eof = ...", "incorrect metadata checksum").
// Also the one fsync helper: HDF5 closes files without fsync, so writers that must survive a crash
// call it.
//
// The HDF5 lock (docs/data.md "One HDF5 lock"). The process calls HDF5 from several threads: each
// data loader's I/O thread reads its dataset all the time, while the training thread writes
// checkpoints (synchronous saves), reads them back (resume, llmtrain-eval) and the sample
// tokenizer reads its file, and the asynchronous checkpoint writer lays out two files at once.
// An HDF5 built without thread safety (H5pubconf.h has no H5_HAVE_THREADSAFE; the default of a
// source build) must never have two threads inside it at once: they corrupt its global state (the
// ID table, the metadata cache, the error stack). So every HDF5 call of the process is made while
// holding h5::Lock, one process-wide recursive mutex: correct with any build of the library (with
// a thread-safe one, such as Debian's 1.10.8, only its own global lock is doubled), and nothing is
// decided per rank from the local library. Callers hold a Lock for one short step (an open, one hyperslab read
// of a rank's share of a checkpoint tensor at resume, one loader read), never for a whole file. The raw data of checkpoint files goes in by pwrite, outside the lock
// (app/checkpoint/raw_h5.hpp).
#pragma once
#include <hdf5.h>

#include <mutex>
#include <string>

#include "data/token_dataset.hpp"

namespace llmtrain::h5 {

/// Owns one HDF5 identifier (file, dataset, dataspace, type, property list, attribute) and closes it
/// with H5Idec_ref (under the Lock), which works for every identifier kind. Move-only.
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

/// The process-wide HDF5 mutex that h5::Lock holds (recursive: a function holding it may call
/// another that takes it). Use Lock rather than this directly.
std::recursive_mutex& mutex();

/// Holds the process-wide HDF5 lock (h5::mutex()) while alive: every HDF5 call of the process, the
/// H5T_NATIVE_* / H5T_STD_* constants included (each expands to an H5open() call), is made inside
/// one, and so is the check()/check_status() that reads the call's error. Nests on one thread.
/// While the outermost Lock of a thread is held HDF5 prints no error stacks (errors become
/// exceptions through check()); on its release the printing handler is restored and the innermost
/// error description of the section is kept for last_error() on this thread. Handle::reset()
/// takes it itself, so a Handle may be closed anywhere.
class Lock {
public:
    Lock();
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
};

/// The innermost description of this thread's most recent HDF5 error: read from the error stack
/// while this thread holds a Lock, else the one kept when its last outermost Lock was released
/// (so a function that locks per step, such as the checkpoint's readers, can report after it
/// returns). "unknown HDF5 error" when there is none.
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
