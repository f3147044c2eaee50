// model/param_layout.hpp — every GPT-2 parameter tensor in one flat buffer, cut into units.
//
// docs/design.md "Parameter layout": unit 0 holds the embeddings
// (wte, wpe), unit 1+l holds transformer layer l, unit n_layer+1 holds the final LayerNorm. Each
// unit's slice is padded to a multiple of `shard_multiple` elements so it splits evenly over a ZeRO
// group, and every tensor starts at a multiple of 8 elements (16 bytes in bf16). Checkpoints store
// tensors by name and shape, never by offset, so the padding may change between runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llmtrain {

/// GPT-2 hyperparameters. seq_len is the maximum context (rows of wpe).
struct GPTConfig {
    int n_layer = 4;
    int n_head = 4;
    int n_embd = 256;
    int seq_len = 256;
    int vocab_size = 8192;
    /// vocab_size rounded up to a multiple of 128 (the wte rows; padded logits are excluded from the loss).
    int padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }
};

/// One named parameter tensor inside the flat buffer.
struct ParamTensor {
    std::string name;            ///< GPT-2 name, e.g. "h.3.attn.c_attn.weight"
    std::vector<int64_t> shape;  ///< row-major, (OC, C) for linear weights
    size_t offset = 0;           ///< first element in the flat buffer
    size_t numel = 0;
    int unit = 0;                ///< unit index (0 embeddings, 1+l layer l, n_layer+1 final LN)
    bool decay = false;          ///< AdamW weight decay applies (2-D weights only)
};

/// A contiguous, padded range of the flat buffer.
struct ParamUnit {
    size_t offset = 0;  ///< first element
    size_t numel = 0;   ///< padded element count (multiple of shard_multiple)
};

/// Elements [offset, offset + numel) of the flat buffer.
struct FlatRange {
    size_t offset = 0;
    size_t numel = 0;
    friend bool operator==(const FlatRange&, const FlatRange&) = default;
};

/// Layout of all parameters (and, identically, of their gradients).
class ParamLayout {
public:
    /// Builds the layout for `cfg`; each unit is padded to a multiple of shard_multiple (>= 1) elements.
    /// Errors: std::invalid_argument if n_embd % n_head != 0 or a size is not positive.
    explicit ParamLayout(const GPTConfig& cfg, int shard_multiple = 1);

    const std::vector<ParamTensor>& tensors() const { return tensors_; }
    const std::vector<ParamUnit>& units() const { return units_; }
    size_t total_numel() const { return total_; }   ///< padded total, the flat buffer's length
    size_t num_parameters() const { return nparams_; }  ///< real parameters (no padding)
    /// The tensor with this name. Errors: std::out_of_range naming it.
    const ParamTensor& find(const std::string& name) const;
    int unit_of_layer(int l) const { return 1 + l; }
    /// Rank `rank`'s shard of a group of n ranks (ZeRO, docs/design.md): chunk `rank` of every unit,
    /// units()[u].numel / n elements each, in unit order. Its "shard-local" buffer is these ranges
    /// back to back. Errors: std::invalid_argument if n does not divide every unit (shard_multiple).
    std::vector<FlatRange> shard(int rank, int n) const;
    const GPTConfig& config() const { return cfg_; }

private:
    GPTConfig cfg_;
    std::vector<ParamTensor> tensors_;
    std::vector<ParamUnit> units_;
    size_t total_ = 0, nparams_ = 0;
};

}  // namespace llmtrain
