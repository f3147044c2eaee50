// app/interop/pretrained.cpp — model.init_from's format dispatch (see pretrained.hpp).
#include "app/interop/pretrained.hpp"

#include <filesystem>

#include "app/interop/hf_gpt2.hpp"
#include "app/interop/llmc_model.hpp"

namespace llmtrain {

void load_pretrained(const std::string& path, const ParamLayout& layout, float* params) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw InteropError("model.init_from: " + path + ": no such file or directory (expected an llm.c model file, "
                           "a HuggingFace GPT-2 directory or its model.safetensors)");
    if (is_llmc_model(path)) return read_llmc_model(path, layout, params);
    read_hf_gpt2(path, layout, params);
}

}  // namespace llmtrain
