// model/dry_ops.hpp — a backend that only counts: memory is address space that is never touched.
//
// `llmtrain --dry-run --world-size N` builds the model, the ZeRO engine and the optimizer of one
// rank of an N-rank run over this backend, so the Allocator's per-category bytes come from the very
// code a real run allocates with (docs/training.md "Memory"), without allocating: GPT-2 1.5B on 64
// ranks is estimated on a laptop. Every op besides memory bookkeeping throws std::logic_error.
#pragma once
#include <memory>

#include "model/ops.hpp"

namespace llmtrain {

/// A counting backend computing in `act_dtype` (what the real backend would use). malloc returns
/// distinct 256-byte-aligned addresses that must never be dereferenced; memset is a no-op.
std::unique_ptr<Ops> make_dry_ops(DType act_dtype);

}  // namespace llmtrain
