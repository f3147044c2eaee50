// parallel/mpi_comm_testing.hpp — a test seam of MpiComm (parallel/mpi_comm.cpp): the segment length.
//
// MpiComm cuts every operation into segments so that no MPI call sees a count near INT_MAX. The
// default segment (2^25 elements per rank) is far larger than any buffer a test can afford, so the
// tests shrink it to a few elements to run the multi-segment code paths.
#pragma once
#include <cstddef>

namespace llmtrain {

/// Sets the most elements one MPI call moves per rank (per chunk for reduce-scatter and all-gather)
/// for MpiComms made afterwards. Default 2^25. Errors: std::invalid_argument when 0.
void set_mpi_segment_elements(size_t elements);

}  // namespace llmtrain
