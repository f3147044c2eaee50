// emu/nccl_reduce.cpp — rank-ordered reductions for every emulated NCCL type and op.
#include "emu/nccl_reduce.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace emu::nccl {

size_t type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
        default: return 0;
    }
}

MPI_Datatype transport_type(ncclDataType_t t) {
    switch (type_size(t)) {
        case 1: return MPI_UINT8_T;
        case 2: return MPI_UINT16_T;
        case 4: return MPI_UINT32_T;
        case 8: return MPI_UINT64_T;
        default: throw std::logic_error("cuda_emu nccl: transport of an unsupported type");
    }
}

bool op_supported(ncclRedOp_t op) {
    return op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || op == ncclAvg;
}

namespace {

// How an element type is accumulated: itself, except 16-bit floats, which use fp32.
template <class T>
struct Elem {
    using Acc = T;
    static Acc load(T x) { return x; }
    static T store(Acc a) { return a; }
};
template <>
struct Elem<__nv_bfloat16> {
    using Acc = float;
    static Acc load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __nv_bfloat16 store(Acc a) { return __float2bfloat16_rn(a); }
};
template <>
struct Elem<__half> {
    using Acc = float;
    static Acc load(__half x) { return __half2float(x); }
    static __half store(Acc a) { return __float2half_rn(a); }
};

// Integer sums and products wrap (computed unsigned: signed overflow is undefined in C++).
template <class A>
A add(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    } else {
        return a + b;
    }
}
template <class A>
A mul(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
        return a * b;
    }
}

template <class T>
void reduce_typed(ncclRedOp_t op, const void* const* in, int n, void* out, size_t count) {
    using E = Elem<T>;
    using Acc = typename E::Acc;
    std::vector<Acc> acc(count);  // separate, so `out` may alias an input
    const T* first = static_cast<const T*>(in[0]);
    for (size_t i = 0; i < count; ++i) acc[i] = E::load(first[i]);
    for (int r = 1; r < n; ++r) {
        const T* x = static_cast<const T*>(in[r]);
        switch (op) {
            case ncclSum: case ncclAvg:
                for (size_t i = 0; i < count; ++i) acc[i] = add(acc[i], E::load(x[i]));
                break;
            case ncclProd:
                for (size_t i = 0; i < count; ++i) acc[i] = mul(acc[i], E::load(x[i]));
                break;
            case ncclMax:
                for (size_t i = 0; i < count; ++i) { Acc v = E::load(x[i]); acc[i] = v > acc[i] ? v : acc[i]; }
                break;
            case ncclMin:
                for (size_t i = 0; i < count; ++i) { Acc v = E::load(x[i]); acc[i] = v < acc[i] ? v : acc[i]; }
                break;
            default:
                throw std::logic_error("cuda_emu nccl: unsupported reduction op");
        }
    }
    if (op == ncclAvg)
        for (size_t i = 0; i < count; ++i) acc[i] = static_cast<Acc>(acc[i] / static_cast<Acc>(n));
    T* o = static_cast<T*>(out);
    for (size_t i = 0; i < count; ++i) o[i] = E::store(acc[i]);
}

}  // namespace

void reduce_in_rank_order(ncclRedOp_t op, ncclDataType_t type, const void* const* in, int n, void* out,
                          size_t count) {
    switch (type) {
        case ncclInt8: return reduce_typed<int8_t>(op, in, n, out, count);
        case ncclUint8: return reduce_typed<uint8_t>(op, in, n, out, count);
        case ncclInt32: return reduce_typed<int32_t>(op, in, n, out, count);
        case ncclUint32: return reduce_typed<uint32_t>(op, in, n, out, count);
        case ncclInt64: return reduce_typed<int64_t>(op, in, n, out, count);
        case ncclUint64: return reduce_typed<uint64_t>(op, in, n, out, count);
        case ncclFloat16: return reduce_typed<__half>(op, in, n, out, count);
        case ncclFloat32: return reduce_typed<float>(op, in, n, out, count);
        case ncclFloat64: return reduce_typed<double>(op, in, n, out, count);
        case ncclBfloat16: return reduce_typed<__nv_bfloat16>(op, in, n, out, count);
        default: throw std::logic_error("cuda_emu nccl: unsupported element type");
    }
}

}  // namespace emu::nccl
