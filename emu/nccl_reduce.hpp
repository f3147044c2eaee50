// emu/nccl_reduce.hpp — element types and the rank-ordered reduction of emulated NCCL.
//
// MPI has neither a bf16 type nor an average, and its own reductions may combine contributions
// in any order; so MPI only moves bytes (an unsigned integer type of the element's size) and the
// arithmetic happens here, always in rank order 0, 1, ..., n-1. Since exactly one rank reduces
// each element and then shares the result, every rank ends up with identical bits.
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // MPI's C API only: OpenMPI's deprecated C++ bindings need libmpi_cxx
#endif
#include <mpi.h>
#include <nccl.h>

#include <cstddef>

namespace emu::nccl {

/// Bytes of one element of `t`; 0 for types not emulated (the fp8 types).
size_t type_size(ncclDataType_t t);

/// An MPI type of the same size as `t`, for moving (never reducing) elements.
MPI_Datatype transport_type(ncclDataType_t t);

/// True for ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg.
bool op_supported(ncclRedOp_t op);

/// out[i] = in[0][i] (op) in[1][i] (op) ... (op) in[n-1][i] for i < count, combined left to right.
/// Floating types accumulate in fp32 (fp64 for ncclFloat64) and round once to the element type;
/// integers wrap around like NCCL's. ncclAvg is the sum divided by n (integer division for
/// integer types). `out` may be one of the inputs.
void reduce_in_rank_order(ncclRedOp_t op, ncclDataType_t type, const void* const* in, int n, void* out,
                          size_t count);

}  // namespace emu::nccl
