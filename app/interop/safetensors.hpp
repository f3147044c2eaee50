// app/interop/safetensors.hpp — the safetensors file format (HuggingFace's weight files): read and write.
//
// Layout (docs/checkpoints.md "Weight formats"): an 8-byte little-endian unsigned header length N, then N
// bytes of JSON: {"<name>": {"dtype": "F32"|"BF16"|"F16", "shape": [...], "data_offsets": [begin, end]},
// ..., "__metadata__": {string: string}} (trailing spaces pad it to a multiple of 8 bytes), then the
// byte buffer: each tensor row-major, little-endian, at [begin, end) of the buffer. The JSON goes through
// nlohmann-json. Only the dtypes GPT-2 weights come in are read (F32, BF16, F16); written: F32, BF16.
#pragma once
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmtrain {

/// A weight file that cannot be read, written, or does not fit the model; what() names the file and,
/// where there is one, the tensor, and what was expected.
struct InteropError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// One tensor as the header lists it.
struct SafetensorInfo {
    std::string dtype;           ///< "F32", "BF16", "F16", ...
    std::vector<int64_t> shape;  ///< row-major
    uint64_t begin = 0, end = 0; ///< byte range within the data buffer
};

/// "[a, b, c]".
std::string shape_text(const std::vector<int64_t>& shape);

/// Whether path looks like a safetensors file: a header length that fits the file, then '{'.
bool is_safetensors(const std::string& path);

/// A safetensors file opened for reading: the header parsed and checked at construction, tensors
/// read one at a time (so a 6 GB file never sits in memory twice).
class SafetensorsReader {
public:
    /// Errors: InteropError naming the file when it cannot be opened, is shorter than its header, the
    /// header is not JSON of the layout above, or a tensor's range is not numel x dtype size bytes
    /// inside the file (a truncated file names the first tensor that runs past its end).
    explicit SafetensorsReader(const std::string& path);

    const std::string& path() const { return path_; }
    /// Every tensor by name (metadata excluded).
    const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
    /// Tensor `name` converted to fp32 into out (numel elements). Errors: InteropError when the dtype
    /// is not F32, BF16 or F16, or the read fails.
    void read_f32(const std::string& name, float* out);

private:
    std::string path_;
    std::ifstream file_;
    uint64_t data_start_ = 0;
    std::map<std::string, SafetensorInfo> tensors_;
};

/// One tensor to write: fp32 values stored as `dtype` ("F32", or "BF16" rounded to nearest even).
struct SafetensorOut {
    std::string name;
    std::vector<int64_t> shape;
    /// Writes the numel fp32 values, row-major, into its argument; called once, when the tensor's
    /// turn comes, so a transposed copy exists for one tensor at a time.
    std::function<void(float*)> values;
};

/// Writes `tensors` to path (replaced if present), in the given order, all of one dtype ("F32" or
/// "BF16"), with __metadata__ = metadata. Errors: InteropError naming the file on an I/O failure.
void write_safetensors(const std::string& path, const std::vector<SafetensorOut>& tensors, const std::string& dtype,
                       const std::map<std::string, std::string>& metadata);

}  // namespace llmtrain
