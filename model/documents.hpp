// model/documents.hpp — document boundaries inside packed windows, for document masking
// (data.document_mask, Megatron-LM's --reset-attention-mask) and position ids that restart at each
// document (data.reset_position_ids, --reset-position-ids). docs/attention.md "Document masking".
//
// llmtrain-prep appends the dataset's eos_id to every document (data/token_dataset.hpp), so a
// window's documents are the runs of tokens that end at an EOS: position t of a row starts a
// document when t = 0 or the token at t - 1 is the EOS (Megatron-LM's rule for its EOD token).
// Host code, plain C++: the GPT builds these arrays per micro-batch from the host's token ids and
// copies them to the device; the backends read them (model/ops.hpp "document masking").
#pragma once
#include <cstdint>

namespace llmtrain {

/// doc_start (B,T) int32 from tokens (B,T) int32: for each row b and position t, the position in
/// row b where t's document starts (0 <= doc_start[b,t] <= t, nondecreasing along t): t itself
/// when t = 0 or tokens[b,t-1] == eos, else doc_start[b,t-1]. pos (B,T) int32, if non-null:
/// t - doc_start[b,t], the position inside the document. eos < 0: one document per row.
void document_starts(const int32_t* tokens, int eos, int B, int T, int32_t* doc_start, int32_t* pos);

/// Tiles of (rows x keys) of block-causal attention over doc_start (B,T), as FlashAttention-2
/// walks them: query block i0 = q*rows of row b needs key blocks from doc_start[b,i0] / keys to
/// the diagonal block (i0 + rows - 1) / keys. `causal`: the key blocks a causal-only walk visits,
/// B * sum over query blocks; `visited`: those the document mask leaves (the rest are skipped,
/// every entry masked).
struct BlockCounts {
    uint64_t causal = 0, visited = 0;
};
/// The counts above for query blocks of `rows` rows and key blocks of `keys` keys (both >= 1).
BlockCounts document_block_counts(const int32_t* doc_start, int B, int T, int rows, int keys);
/// The backward's walk (flash_backward.cu): key block j0 = k*keys of row b steps over the queries
/// from j0 in steps of `rows`, to T causally (`causal`), and with documents only to the first query
/// whose document starts after the block's last key (`visited`), per (b, key block), summed.
BlockCounts document_backward_counts(const int32_t* doc_start, int B, int T, int keys, int rows);

}  // namespace llmtrain
