// emu/device_wmma.hpp — nvcuda::wmma (warp-level matrix multiply) on the CPU.
//
// Models the 16x16x16 shape with bf16 or fp16 inputs and fp32 accumulators: fragment,
// fill_fragment, load_matrix_sync, store_matrix_sync, mma_sync (CUDA C++ Programming Guide, "Warp
// Matrix Functions"). Every _sync call is a warp collective: all 32 lanes of the warp must call it
// at the same site (checked through __syncwarp(0xffffffff)), with the same pointer, ldm and layout
// (checked); the pointer must be 256-bit aligned and ldm a multiple of 16 bytes (the guide's
// requirements). A store is visible to the storing lane only: other lanes read it after a
// __syncwarp, as on a GPU.
//
// The guide leaves the mapping of fragment elements (x[0..7] of each lane) to matrix positions
// unspecified, so the emulator makes one up: a permutation of the 256 positions per fragment kind,
// drawn from the seed of emu::set_wmma_layout ($CUDA_EMU_WMMA_LAYOUT). A kernel may touch x[]
// only uniformly (the same operation on every element); one that reads elements by position gets
// different results under different seeds (tests/cuda_emu/test_wmma.cu).
//
// mma_sync: d[r][c] = c[r][c] + sum_k a[r][k] * b[k][c] in fp32, k = 0..15 in increasing order;
// bf16 and fp16 products are exact in fp32, so a plain C++ loop in that order gives the same bits.
// (A GPU adds in an unspecified order and may round differently inside one 16-term sum.)
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <source_location>
#include <type_traits>

#include "emu/device.hpp"
#include "emu/emu.hpp"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/// One lane's share of a 16x16 tile: 8 of its 256 elements, at positions emu::wmma_layout says.
template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
    static_assert(M == 16 && N == 16 && K == 16, "cuda_emu models the 16x16x16 wmma shape only");
    static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                   : std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                  "cuda_emu models bf16/fp16 matrix_a/matrix_b and fp32 accumulator fragments");

public:
    using element_type = T;
    enum { num_elements = 8 };
    T x[num_elements];
};

}  // namespace nvcuda::wmma

namespace emu::detail {

/// Fragment kinds, each with its own element-to-position permutation.
enum WmmaKind : int { wmma_a = 0, wmma_b = 1, wmma_acc = 2 };
template <class Use>
constexpr int wmma_kind() {
    return std::is_same_v<Use, nvcuda::wmma::matrix_a> ? wmma_a : std::is_same_v<Use, nvcuda::wmma::matrix_b> ? wmma_b : wmma_acc;
}

/// What one lane passes to a wmma collective, published for the other lanes of its warp.
struct WmmaCall {
    const void* ptr = nullptr;  ///< memory (load/store) or this lane's fragment a (mma)
    const void* ptr2 = nullptr; ///< this lane's fragment b (mma)
    unsigned ldm = 0;
    int layout = 0;
};
/// One slot per thread of the running block (a worker runs one block at a time).
inline thread_local WmmaCall t_wmma_calls[1024];

/// Enters a warp collective: publishes `call`, waits for all 32 lanes at `site`, and checks that
/// they passed the same pointer, ldm and layout (`uniform`). Returns the first lane of the warp.
unsigned wmma_enter(const char* fn, const WmmaCall& call, bool uniform, std::source_location site);
/// Leaves it: waits until every lane is done reading the others' published values.
void wmma_leave(std::source_location site);
/// Checks load/store arguments: 256-bit aligned pointer, ldm * elem_bytes a multiple of 16 bytes.
void wmma_check_memory(const char* fn, const void* p, unsigned ldm, size_t elem_bytes);
/// Position (row * 16 + col) of element e of `lane`, and the inverse (lane * 8 + e of a position),
/// for fragment kind `kind` under the current layout seed.
const uint16_t* wmma_positions(int kind);
const uint16_t* wmma_owners(int kind);

inline float wmma_float(float v) { return v; }
inline float wmma_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float wmma_float(__half v) { return __half2float(v); }

/// Element (r, c) of a tile in memory: row-major or column-major with leading dimension ldm.
inline size_t wmma_offset(int pos, unsigned ldm, bool col) {
    const int r = pos / 16, c = pos % 16;
    return col ? static_cast<size_t>(c) * ldm + r : static_cast<size_t>(r) * ldm + c;
}

}  // namespace emu::detail

namespace nvcuda::wmma {

/// Sets every element of this lane's share to v (not a collective).
template <class Use, int M, int N, int K, class T, class L, class V>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
    for (auto& e : f.x) e = static_cast<T>(v);
}

/// Loads a matrix_a/matrix_b tile (16x16, T elements, layout L, leading dimension ldm elements).
template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm,
                      std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
    wmma_check_memory("load_matrix_sync", p, ldm, sizeof(T));
    const unsigned lane = linear_thread() % 32;
    wmma_enter("load_matrix_sync", {p, nullptr, ldm, 0}, true, site);
    const uint16_t* pos = wmma_positions(wmma_kind<Use>());
    for (int e = 0; e < 8; e++) f.x[e] = p[wmma_offset(pos[lane * 8 + e], ldm, std::is_same_v<L, col_major>)];
    wmma_leave(site);
}

/// Loads an fp32 accumulator tile stored with `layout`.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t layout,
                             std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    wmma_check_memory("load_matrix_sync", p, ldm, sizeof(float));
    const unsigned lane = linear_thread() % 32;
    wmma_enter("load_matrix_sync", {p, nullptr, ldm, layout}, true, site);
    const uint16_t* pos = wmma_positions(wmma_acc);
    for (int e = 0; e < 8; e++) f.x[e] = p[wmma_offset(pos[lane * 8 + e], ldm, layout == mem_col_major)];
    wmma_leave(site);
}

/// Stores an fp32 accumulator tile with `layout` (each lane writes its own 8 elements).
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout,
                              std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    wmma_check_memory("store_matrix_sync", p, ldm, sizeof(float));
    const unsigned lane = linear_thread() % 32;
    wmma_enter("store_matrix_sync", {p, nullptr, ldm, layout}, true, site);
    const uint16_t* pos = wmma_positions(wmma_acc);
    for (int e = 0; e < 8; e++) p[wmma_offset(pos[lane * 8 + e], ldm, layout == mem_col_major)] = f.x[e];
    wmma_leave(site);
}

/// d = a * b + c over the warp's 16x16x16 tiles (fp32, k in increasing order; see the file comment).
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c,
              std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    const unsigned lane = linear_thread() % 32;
    const unsigned base = wmma_enter("mma_sync", {&a, &b, 0, 0}, false, site);
    const uint16_t* pos = wmma_positions(wmma_acc);
    const uint16_t* own_a = wmma_owners(wmma_a);
    const uint16_t* own_b = wmma_owners(wmma_b);
    auto elem = [&](const uint16_t* owners, int r, int k, bool is_b) {
        const int o = owners[r * 16 + k];
        const WmmaCall& w = t_wmma_calls[base + o / 8];
        return is_b ? wmma_float(static_cast<const fragment<matrix_b, 16, 16, 16, T, LB>*>(w.ptr2)->x[o % 8])
                    : wmma_float(static_cast<const fragment<matrix_a, 16, 16, 16, T, LA>*>(w.ptr)->x[o % 8]);
    };
    float out[8];
    for (int e = 0; e < 8; e++) {
        const int r = pos[lane * 8 + e] / 16, col = pos[lane * 8 + e] % 16;
        float acc = c.x[e];
        for (int k = 0; k < 16; k++) acc += elem(own_a, r, k, false) * elem(own_b, k, col, true);
        out[e] = acc;
    }
    wmma_leave(site);  // the other lanes are done reading this lane's a and b
    for (int e = 0; e < 8; e++) d.x[e] = out[e];
}

}  // namespace nvcuda::wmma
