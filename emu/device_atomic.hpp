// emu/device_atomic.hpp — CUDA atomics and fences on the CPU.
//
// Blocks of one launch run concurrently on several worker threads, so every atomic is a real
// hardware atomic (GCC __atomic builtins, relaxed order like CUDA's plain atomics). Types the CPU
// cannot add atomically (float, double, __nv_bfloat16, __half and their pairs) use a
// compare-and-swap loop on the bit pattern, as CUDA did before native float atomics. Each function
// returns the old value. Semantics: CUDA C++ Programming Guide, "Atomic Functions".
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>

namespace emu::detail {

/// Applies old -> f(old) atomically to the `Bits`-sized object at p by CAS on its bit pattern.
/// (memcpy, not bit_cast: __nv_bfloat162 and __half are not trivially copyable.)
template <class T, class Bits, class F>
T atomic_update(T* p, F f) {
    static_assert(sizeof(T) == sizeof(Bits));
    Bits* bp = reinterpret_cast<Bits*>(p);
    Bits old_bits = __atomic_load_n(bp, __ATOMIC_RELAXED);
    for (;;) {
        T old_value;
        std::memcpy(static_cast<void*>(&old_value), &old_bits, sizeof(T));
        const T new_value = static_cast<T>(f(old_value));
        Bits new_bits;
        std::memcpy(&new_bits, static_cast<const void*>(&new_value), sizeof(T));
        if (__atomic_compare_exchange_n(bp, &old_bits, new_bits, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return old_value;
    }
}

}  // namespace emu::detail

// ---- integer atomics: native ----
#define EMU_INT_ATOMICS(T)                                                                        \
    inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }          \
    inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }        \
    inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }          \
    inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }            \
    inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }          \
    inline T atomicMin(T* p, T v) {                                                               \
        return ::emu::detail::atomic_update<T, T>(p, [v](T o) { return v < o ? v : o; });         \
    }                                                                                             \
    inline T atomicMax(T* p, T v) {                                                               \
        return ::emu::detail::atomic_update<T, T>(p, [v](T o) { return v > o ? v : o; });         \
    }                                                                                             \
    inline T atomicCAS(T* p, T compare, T v) {                                                    \
        __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);   \
        return compare; /* holds the old value either way */                                      \
    }
EMU_INT_ATOMICS(int)
EMU_INT_ATOMICS(unsigned int)
EMU_INT_ATOMICS(unsigned long long)
#undef EMU_INT_ATOMICS

inline long long atomicMin(long long* p, long long v) {
    return ::emu::detail::atomic_update<long long, long long>(p, [v](long long o) { return v < o ? v : o; });
}
inline long long atomicMax(long long* p, long long v) {
    return ::emu::detail::atomic_update<long long, long long>(p, [v](long long o) { return v > o ? v : o; });
}
inline unsigned short atomicCAS(unsigned short* p, unsigned short compare, unsigned short v) {
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;
}
inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline unsigned int atomicSub(unsigned int* p, unsigned int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }

/// ((old >= v) ? 0 : old + 1), atomically.
inline unsigned int atomicInc(unsigned int* p, unsigned int v) {
    return ::emu::detail::atomic_update<unsigned, unsigned>(p, [v](unsigned o) { return o >= v ? 0u : o + 1; });
}
/// ((old == 0 || old > v) ? v : old - 1), atomically.
inline unsigned int atomicDec(unsigned int* p, unsigned int v) {
    return ::emu::detail::atomic_update<unsigned, unsigned>(p,
                                                            [v](unsigned o) { return (o == 0 || o > v) ? v : o - 1; });
}

// ---- floating-point atomics: CAS loops ----
inline float atomicAdd(float* p, float v) {
    return ::emu::detail::atomic_update<float, uint32_t>(p, [v](float o) { return o + v; });
}
inline double atomicAdd(double* p, double v) {
    return ::emu::detail::atomic_update<double, uint64_t>(p, [v](double o) { return o + v; });
}
inline float atomicExch(float* p, float v) {
    return std::bit_cast<float>(__atomic_exchange_n(reinterpret_cast<uint32_t*>(p), std::bit_cast<uint32_t>(v),
                                                    __ATOMIC_RELAXED));
}
/// bf16 add: the sum is computed in fp32 and rounded to nearest even, as the hardware does.
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    return ::emu::detail::atomic_update<__nv_bfloat16, uint16_t>(
        p, [v](__nv_bfloat16 o) { return __float2bfloat16_rn(__bfloat162float(o) + __bfloat162float(v)); });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
    return ::emu::detail::atomic_update<__nv_bfloat162, uint32_t>(p, [v](__nv_bfloat162 o) {
        return __floats2bfloat162_rn(__low2float(o) + __low2float(v), __high2float(o) + __high2float(v));
    });
}
inline __half atomicAdd(__half* p, __half v) {
    return ::emu::detail::atomic_update<__half, uint16_t>(
        p, [v](__half o) { return __float2half_rn(__half2float(o) + __half2float(v)); });
}

// ---- fences: the CPU's sequentially consistent fence orders more than any CUDA scope needs ----
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
