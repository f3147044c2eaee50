// app/interop/pretrained.cpp — model.init_from's format dispatch (see pretrained.hpp).
#include "app/interop/pretrained.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "app/interop/hf_gpt2.hpp"
#include "app/interop/llmc_model.hpp"

namespace llmtrain {

void load_pretrained(const std::string& path, const ParamLayout& layout, float* params) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw InteropError("model.init_from: " + path + ": no such file or directory (expected an llm.c model file, "
                           "a HuggingFace GPT-2 directory or its model.safetensors)");
    if (is_llmc_model(path)) return read_llmc_model(path, layout, params);
    if (std::filesystem::is_directory(path, ec) || is_safetensors(path)) return read_hf_gpt2(path, layout, params);
    std::ifstream f(path, std::ios::binary);
    int32_t magic = 0;
    f.read(reinterpret_cast<char*>(&magic), 4);
    throw InteropError(path + ": neither an llm.c model file (magic " + std::to_string(magic) + ", expected " +
                       std::to_string(kLlmcMagic) + ") nor a safetensors file (no JSON header after 8 bytes)");
}

}  // namespace llmtrain
