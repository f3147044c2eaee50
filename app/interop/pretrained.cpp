// app/interop/pretrained.cpp — model.init_from's format dispatch (see pretrained.hpp).
#include "app/interop/pretrained.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "app/interop/hf_gpt2.hpp"
#include "app/interop/hf_llama.hpp"
#include "app/interop/hf_shards.hpp"
#include "app/interop/llmc_model.hpp"

namespace llmtrain {

namespace {

/// A HuggingFace model at path (its directory, model.safetensors or index.json): config.json's
/// model_type, which must be the layout's architecture (mixtral, qwen3 and qwen3_moe count as llama
/// here; read_hf_llama tells them apart by the config's model.moe and model.qk_norm).
void check_hf_arch(const std::string& path, const ParamLayout& layout) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
    std::string type = hf_model_type(dir.string());
    if (type == "mixtral" || type == "qwen3" || type == "qwen3_moe") type = "llama";
    const std::string ours = arch_name(layout.config().arch);
    if (!type.empty() && type != ours)
        throw InteropError((dir / "config.json").string() + ": model_type = \"" + type + "\", but the config has "
                           "model.arch = \"" + ours + "\" (set model.arch and the shape to the file's model)");
}

}  // namespace

void load_pretrained(const std::string& path, const ParamLayout& layout, float* params) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw InteropError("model.init_from: " + path + ": no such file or directory (expected an llm.c model file, "
                           "a HuggingFace GPT-2 or Llama directory, its model.safetensors or its " + kHfIndexName + ")");
    const bool llama = layout.config().arch == Arch::llama;
    if (is_llmc_model(path)) {
        if (llama)
            throw InteropError(path + ": an llm.c GPT-2 model file, but the config has model.arch = \"llama\"");
        return read_llmc_model(path, layout, params);
    }
    if (std::filesystem::is_directory(path, ec) || is_safetensors(path) || path.ends_with(".index.json")) {
        check_hf_arch(path, layout);
        return llama ? read_hf_llama(path, layout, params) : read_hf_gpt2(path, layout, params);
    }
    std::ifstream f(path, std::ios::binary);
    int32_t magic = 0;
    f.read(reinterpret_cast<char*>(&magic), 4);
    throw InteropError(path + ": neither an llm.c model file (magic " + std::to_string(magic) + ", expected " +
                       std::to_string(kLlmcMagic) + ") nor a safetensors file (no JSON header after 8 bytes)");
}

}  // namespace llmtrain
