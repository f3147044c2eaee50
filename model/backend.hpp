// model/backend.hpp — choosing and creating a backend.
#pragma once
#include <memory>
#include <string>

#include "model/cuda/cuda_backend.hpp"
#include "model/ops.hpp"

namespace llmtrain {

/// Creates the backend named `name`: "cpu" (fp32 reference), "cuda" (needs a build with CUDA and a
/// device), or "auto" (cuda when a device is present, else cpu). `precision` is "fp32" or "bf16"
/// (bf16 only on cuda). `cuda` holds the CUDA backend's options (model.attention, "auto" resolved
/// by the CUDA backend (resolve_attention), and its workspace, training.stochastic_rounding); the CPU
/// backend has one attention and no rounding to choose and ignores them. The path a backend runs
/// is Ops::attention_name (and attention_reason). Errors: std::runtime_error naming what is missing.
std::unique_ptr<Ops> make_backend(const std::string& name, const std::string& precision,
                                  const CudaBackendOptions& cuda = {});

}  // namespace llmtrain
