// app/interop/hf_shards.hpp — HuggingFace's weight directories: one model.safetensors, or shards
// model-0000k-of-0000n.safetensors listed by model.safetensors.index.json.
//
// The index (as save_pretrained writes it, docs/checkpoints.md "Weight formats"): a JSON object
// {"metadata": {"total_size": <bytes of all tensors' data>}, "weight_map": {"<tensor>": "<shard file>"}},
// shard files beside it, each an ordinary safetensors file. save_pretrained starts a new shard when the
// next tensor would push the current one past max_shard_size (5GB by default); so does this writer.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/interop/safetensors.hpp"

namespace llmtrain {

/// HF's name of the index file: "model.safetensors.index.json".
inline constexpr const char* kHfIndexName = "model.safetensors.index.json";

/// Writes `tensors` (in order, all as `dtype`, "F32" or "BF16", __metadata__ = metadata) into dir as
/// dir/model.safetensors when their data fits max_shard_bytes (bytes, > 0), else as shards
/// model-0000k-of-0000n.safetensors of at most max_shard_bytes each (a single tensor larger than that
/// gets a shard of its own) plus dir/model.safetensors.index.json. A stale model.safetensors, index or
/// model-*-of-*.safetensors left in dir by an earlier export is removed first. Returns the files
/// written (names within dir). Errors: InteropError naming the file on an I/O failure.
std::vector<std::string> write_hf_weights(const std::string& dir, const std::vector<SafetensorOut>& tensors,
                                          const std::string& dtype, const std::map<std::string, std::string>& metadata,
                                          uint64_t max_shard_bytes);

/// HF weights opened for reading: `path` is a directory (its model.safetensors.index.json when present,
/// else its model.safetensors), an index file, or one safetensors file. One reader per shard, its
/// header parsed at construction; tensor data is read one tensor at a time.
class HfWeights {
public:
    /// Errors: InteropError naming the path: a directory with neither file, an index that is not JSON or
    /// has no weight_map object of strings, a shard it names that is missing or not safetensors, or a
    /// tensor the weight_map puts in a shard whose header lacks it. Every shard's header is read here.
    explicit HfWeights(const std::string& path);

    /// The directory holding config.json (the weights' directory).
    const std::string& dir() const { return dir_; }
    /// What was opened, for messages: the index or the single safetensors file.
    const std::string& source() const { return source_; }
    /// Every tensor by name, with its dtype, shape and byte range within its file.
    const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
    /// The file holding tensor `name` (a path), for messages.
    const std::string& file_of(const std::string& name) const;
    /// Tensor `name` as fp32 into out (numel elements). Errors: InteropError naming the file and tensor
    /// (a dtype other than F32, BF16, F16; a failed read).
    void read_f32(const std::string& name, float* out);

private:
    std::string dir_, source_;
    std::map<std::string, SafetensorInfo> tensors_;
    std::map<std::string, size_t> file_index_;                 // tensor -> index into readers_
    std::vector<std::unique_ptr<SafetensorsReader>> readers_;  // one per file
};

}  // namespace llmtrain
