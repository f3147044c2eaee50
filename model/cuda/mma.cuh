// model/cuda/mma.cuh — warp-level matrix multiply (tensor cores) for the CUDA backend's kernels.
//
// `wmma` names nvcuda::wmma: under nvcc CUDA's own <mma.h>; in the emulated build (emu/)
// the prelude's C++ model of the same API (emu/device_wmma.hpp; docs/cuda_emu.md,
// "Tensor cores"). Kernels use the 16x16x16 shape with bf16 inputs and fp32 accumulators, and may
// touch fragment elements only uniformly (wmma's element-to-lane mapping is unspecified).
#pragma once
#ifndef EMU_BUILD
#include <mma.h>
#endif

namespace llmtrain::cuda {
namespace wmma = nvcuda::wmma;
constexpr int kMmaTile = 16;  ///< the m = n = k edge of one wmma tile
}  // namespace llmtrain::cuda
