// model/cpu/parallel.hpp — static work split for code inside an OpenMP parallel region.
//
// The CPU ops split rows or channels into one contiguous range per thread so that each thread can
// call single-threaded sgemm on its slice and every reduction has a fixed order.
#pragma once
#include <algorithm>
#include <omp.h>

namespace llmtrain::cpu {

/// The range [*lo, *hi) of [0, n) owned by the calling OpenMP thread: contiguous slices whose
/// length is a multiple of `align` (except the last). Outside a parallel region: the whole range.
inline void thread_range(int n, int align, int* lo, int* hi) {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int per = ((n + nt - 1) / nt + align - 1) / align * align;
    *lo = std::min(n, id * per);
    *hi = std::min(n, *lo + per);
}

}  // namespace llmtrain::cpu
