// model/cuda/flash_attention.hpp — which shapes the tensor-core FlashAttention-2 kernels
// (flash_attention.cu, model.attention = "native" in bf16) take (plain C++: CudaOps and the tests
// read it; other shapes stay on attention.cu's CUDA-core kernels).
#pragma once

namespace llmtrain::cuda {

/// True when head size C / NH is 64 or 128 (the kernels are compiled for those two).
inline bool flash_attention_supported(int C, int NH) {
    return NH > 0 && C % NH == 0 && (C / NH == 64 || C / NH == 128);
}

}  // namespace llmtrain::cuda
