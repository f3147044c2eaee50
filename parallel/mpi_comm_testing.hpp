// parallel/mpi_comm_testing.hpp — test seams of MpiComm (parallel/mpi_comm.cpp): the segment
// length, and a group whose sums come out one unit in the last place higher.
//
// MpiComm cuts every operation into segments so that no MPI call sees a count near INT_MAX. The
// default segment (2^25 elements per rank) is far larger than any buffer a test can afford, so the
// tests shrink it to a few elements to run the multi-segment code paths.
//
// Real NCCL sums in an order of its own per communicator, so two groups summing equal inputs may
// differ in the last bit; the perturbed group makes that certain on the CPU, as the emulator's
// CUDA_EMU_NCCL_PERTURB does for NCCL (tests/parallel/test_replicas.cpp).
#pragma once
#include <cstddef>
#include <vector>

namespace llmtrain {

/// Sets the most elements one MPI call moves per rank (per chunk for reduce-scatter and all-gather)
/// for MpiComms made afterwards. Default 2^25. Errors: std::invalid_argument when 0.
void set_mpi_segment_elements(size_t elements);

/// MpiComms made afterwards on exactly these world ranks, in this order, move every reduction
/// result (all_reduce_sum, reduce_scatter_sum; fp32 and bf16) up by one unit in the last place,
/// on every member alike. Empty (the default): none.
void set_mpi_perturbed_group(const std::vector<int>& world_ranks);

}  // namespace llmtrain
