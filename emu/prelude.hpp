// emu/prelude.hpp — included first (g++ -include) into every .cu compiled for cuda_emu.
//
// It turns g++ into a CUDA compiler for the emulator: the real CUDA 13 headers provide the types
// (dim3, cudaStream_t, __nv_bfloat16 with exact conversions, ...) and the runtime declarations that
// our extern "C" functions implement; then the device-side API (threadIdx, __syncthreads, warp
// shuffles, atomics, intrinsics) is replaced by the emulator's. Under g++ the headers already
// expand __global__/__device__/__host__ to nothing; we redefine the two qualifiers that must mean
// something on the CPU. __CUDACC__ and __CUDA_ARCH__ stay undefined.
#pragma once
#define EMU_BUILD 1

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// Static shared memory: one copy per worker thread. A worker runs one block at a time and all the
// fibers (CUDA threads) of that block on itself, so the worker's copy is the block's copy.
#undef __shared__
#define __shared__ thread_local
// Occupancy hints mean nothing on the CPU.
#undef __launch_bounds__
#define __launch_bounds__(...)

#include "emu/emu.hpp"
#include "emu/device.hpp"
#include "emu/device_atomic.hpp"
#include "emu/device_math.hpp"
#include "emu/device_wmma.hpp"
#include "emu/device_ptx.hpp"
#include "emu/kernel_launch.hpp"
