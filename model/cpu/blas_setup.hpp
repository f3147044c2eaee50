// model/cpu/blas_setup.hpp — one-time OpenBLAS setup for the CPU backend (see blas_setup.cpp).
#pragma once

namespace llmtrain::cpu {

/// Sets OpenBLAS to one thread and, when OpenBLAS fell back to its generic kernels on a CPU it does
/// not know, re-selects the kernels that match the CPU's vector ISA. Idempotent; thread-safe.
void setup_blas();

/// OpenBLAS's kernel family in use, e.g. "SkylakeX" (for logs and the benchmark).
const char* blas_core();

}  // namespace llmtrain::cpu
