// tests/app/slow_io.c — slow storage for rehearsals: an LD_PRELOAD library that delays the writes and
// fsyncs a process makes to files under one directory, so that a checkpoint on this machine's fast
// disk takes as long as one of a big model on a slow shared file system (docs/checkpoints.md "Who
// does what at a commit", tests/app/slow_commit.sh).
//
// Environment (read once, when the library is loaded):
//   LLMTRAIN_SLOW_IO_DIR         the directory whose files are slowed (a path prefix, as the kernel
//                                reports it in /proc/self/fd); unset: nothing is slowed
//   LLMTRAIN_SLOW_IO_FSYNC_MS    milliseconds added to each fsync and fdatasync of such a file or
//                                directory
//   LLMTRAIN_SLOW_IO_MB_PER_S    write, pwrite and pwritev to such a file sleep bytes / rate (MB = 1e6 B)
// The delay comes before the real call, which then runs unchanged.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static const char* g_dir;
static size_t g_dir_len;
static double g_fsync_s, g_bytes_per_s;

__attribute__((constructor)) static void setup(void) {
    g_dir = getenv("LLMTRAIN_SLOW_IO_DIR");
    g_dir_len = g_dir ? strlen(g_dir) : 0;
    const char* f = getenv("LLMTRAIN_SLOW_IO_FSYNC_MS");
    const char* r = getenv("LLMTRAIN_SLOW_IO_MB_PER_S");
    g_fsync_s = f ? atof(f) / 1e3 : 0;
    g_bytes_per_s = r ? atof(r) * 1e6 : 0;
}

/// Whether fd names a file or directory under LLMTRAIN_SLOW_IO_DIR.
static int slowed(int fd) {
    if (g_dir_len == 0) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strncmp(path, g_dir, g_dir_len) == 0;
}

static void pause_s(double s) {
    if (s <= 0) return;
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0) {
    }
}

static void pause_bytes(int fd, size_t n) {
    if (g_bytes_per_s > 0 && slowed(fd)) pause_s((double)n / g_bytes_per_s);
}

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*pwritev_fn)(int, const struct iovec*, int, off_t);
typedef int (*sync_fn)(int);

/// The next definition of `name` (libc's), looked up once.
#define REAL(name, type) \
    static type real_##name; \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void* buf, size_t n) {
    REAL(write, write_fn);
    pause_bytes(fd, n);
    return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
    REAL(pwrite, pwrite_fn);
    pause_bytes(fd, n);
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
    REAL(pwrite64, pwrite_fn);
    pause_bytes(fd, n);
    return real_pwrite64(fd, buf, n, off);
}

ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
    REAL(pwritev, pwritev_fn);
    size_t n = 0;
    for (int i = 0; i < cnt; ++i) n += iov[i].iov_len;
    pause_bytes(fd, n);
    return real_pwritev(fd, iov, cnt, off);
}

int fsync(int fd) {
    REAL(fsync, sync_fn);
    if (slowed(fd)) pause_s(g_fsync_s);
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync, sync_fn);
    if (slowed(fd)) pause_s(g_fsync_s);
    return real_fdatasync(fd);
}
