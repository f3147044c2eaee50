// app/eval/eval_model.cpp — llmtrain-eval's weights and tokenizer (see eval_model.hpp).
#include "app/eval/eval_model.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/checkpoint/checkpoint.hpp"
#include "app/interop/checkpoint_model.hpp"
#include "app/interop/hf_llama.hpp"
#include "app/interop/llmc_model.hpp"
#include "app/interop/pretrained.hpp"
#include "app/interop/safetensors.hpp"
#include "data/token_dataset.hpp"

namespace llmtrain {

namespace fs = std::filesystem;

namespace {

/// The shape of a HuggingFace GPT-2 from its config.json (`path`: the directory or model.safetensors).
GPTConfig hf_shape(const std::string& path) {
    const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
    const std::string file = (dir / "config.json").string();
    std::ifstream f(file);
    if (!f) throw InteropError(file + ": cannot open (a HuggingFace model needs config.json beside model.safetensors)");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
        throw InteropError(file + ": not JSON: " + e.what());
    }
    GPTConfig g;
    auto get = [&](const char* key, int* out) {
        if (!j.contains(key) || !j[key].is_number_integer())
            throw InteropError(file + ": key \"" + key + "\": expected an integer");
        *out = j[key].get<int>();
    };
    get("n_layer", &g.n_layer);
    get("n_head", &g.n_head);
    get("n_embd", &g.n_embd);
    get("n_positions", &g.seq_len);
    get("vocab_size", &g.vocab_size);
    return g;
}

/// The shape in an llm.c model file's header (int32 [2] max_seq_len, [3] vocab_size, [4] n_layer,
/// [5] n_head, [6] channels).
GPTConfig llmc_shape(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    int32_t h[8] = {};
    if (!f.read(reinterpret_cast<char*>(h), sizeof h)) throw InteropError(path + ": shorter than llm.c's header");
    GPTConfig g;
    g.seq_len = h[2];
    g.vocab_size = h[3];
    g.n_layer = h[4];
    g.n_head = h[5];
    g.n_embd = h[6];
    return g;
}

/// A tokenizer from a file of any kind the data tools know.
EvalTokenizer tokenizer_from(const std::string& path) {
    if (!fs::exists(path)) throw DataError(path + ": no such tokenizer file or dataset");
    std::ifstream f(path, std::ios::binary);
    char sig[8] = {};
    f.read(sig, sizeof sig);
    if (std::string(sig, 8) == std::string("\x89HDF\r\n\x1a\n", 8)) {  // a token dataset: its /tokenizer
        TokenDataset ds(path);
        Tokenizer t = Tokenizer::from_dataset(ds);
        const std::string kind = t.kind();
        return {std::move(t), kind + " from " + path + " (/tokenizer)", ""};
    }
    std::string sp_error;
    try {
        return {Tokenizer::from_file(path), "sentencepiece from " + path, ""};
    } catch (const std::exception& e) {
        sp_error = e.what();
    }
    try {
        return {Tokenizer::gpt2_from_file(path), "gpt2 from " + path, ""};
    } catch (const std::exception& e) {
        throw DataError(path + ": neither a token dataset, a SentencePiece model (" + sp_error +
                        ") nor GPT-2's tiktoken ranks (" + e.what() + ")");
    }
}

}  // namespace

EvalWeights load_eval_weights(const std::string& path) {
    EvalWeights w;
    if (!fs::exists(path)) throw ConfigError(path + ": no such checkpoint, run directory or weights file");
    const std::string ckpt = checkpoint_named(path);  // verified; from a run dir, the one resume takes
    if (!ckpt.empty()) {
        const TrainState st = read_train_state(ckpt);
        w.model = checkpoint_model_config(ckpt, st);
        w.params.resize(ParamLayout(w.model).total_numel());
        read_params(ckpt, ParamLayout(w.model), w.params.data());
        w.source = "checkpoint " + ckpt + " (step " + std::to_string(st.step) + ")";
        const fs::path cfg = fs::path(ckpt).parent_path().parent_path() / "config.toml";
        if (fs::exists(cfg)) {
            w.run = load_config(cfg.string(), {});
            w.run_config_path = cfg.string();
        }
        return w;
    }
    const bool llmc = is_llmc_model(path);
    const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
    const std::string type = llmc ? "" : hf_model_type(dir.string());
    const bool llama = type == "llama" || type == "mixtral" || type == "qwen3" || type == "qwen3_moe";
    w.model = llmc ? llmc_shape(path) : llama ? hf_llama_config(path) : hf_shape(path);
    w.params.resize(ParamLayout(w.model).total_numel());
    load_pretrained(path, ParamLayout(w.model), w.params.data());  // checks the rest of the format
    const char* hf = type == "mixtral"     ? "HuggingFace Mixtral "
                     : type == "qwen3"     ? "HuggingFace Qwen3 "
                     : type == "qwen3_moe" ? "HuggingFace Qwen3-MoE "
                                           : "HuggingFace Llama ";
    w.source = (llmc ? "llm.c model file " : llama ? hf : "HuggingFace GPT-2 ") + path;
    return w;
}

EvalTokenizer resolve_eval_tokenizer(const EvalWeights& w, const std::string& tokenizer_path,
                                     const std::string& data_path) {
    std::string from = !tokenizer_path.empty() ? tokenizer_path : data_path;
    if (from.empty() && w.run) from = w.run->data.train;
    if (from.empty())
        throw ConfigError("no tokenizer: " + w.source + " has no run config.toml; give --tokenizer (a token "
                          "dataset, a SentencePiece .model or GPT-2's tiktoken ranks) or --data");
    EvalTokenizer t = tokenizer_from(from);
    if (t.tok.vocab_size() > w.model.vocab_size)
        throw ConfigError("the tokenizer (" + t.source + ") has " + std::to_string(t.tok.vocab_size()) +
                          " ids, more than the model's vocab_size " + std::to_string(w.model.vocab_size));
    const std::string mine = sha256_hex(t.tok.model_bytes());
    if (w.run && fs::exists(w.run->data.train)) {
        TokenDataset train(w.run->data.train);
        const std::string want = train.info().tokenizer_sha256;
        if (want != mine)
            throw DataError("the tokenizer (" + t.source + ", SHA-256 " + mine + ") is not the one the model " +
                            "trained with (" + w.run->data.train + "'s, SHA-256 " + want + ", from " +
                            w.run_config_path + ")");
        t.note = "SHA-256 " + mine.substr(0, 16) + "... equals the training data's (" + w.run->data.train + ")";
    } else if (w.run) {
        t.note = "not checked: the run's data.train " + w.run->data.train + " is not readable here";
    } else {
        t.note = "not checked: no run config beside the weights (the vocabulary fits the model's)";
    }
    return t;
}

}  // namespace llmtrain
