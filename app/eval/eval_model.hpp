// app/eval/eval_model.hpp — what llmtrain-eval scores (app/eval/eval_main.cpp): a model's weights from a
// checkpoint or from model.init_from's formats, the run config that trained it when there is one,
// and the tokenizer, checked against the one the model trained with (docs/evaluation.md "llmtrain-eval").
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "data/tokenizer.hpp"
#include "model/param_layout.hpp"

namespace llmtrain {

struct EvalWeights {
    GPTConfig model;                ///< its shape
    std::vector<float> params;      ///< host fp32, ParamLayout(model).total_numel()
    std::string source;             ///< what was read, for the log: "checkpoint DIR (step N)", "HuggingFace GPT-2 DIR", ...
    std::optional<Config> run;      ///< the run's config.toml when `path` is (in) a run directory
    std::string run_config_path;    ///< its path ("" when none)
};

/// Loads the weights `path` names: a checkpoint directory (state.toml), a run directory (the checkpoint
/// resume would take: checkpoint_named), an llm.c model file or a HuggingFace GPT-2 (directory or
/// model.safetensors with config.json beside it; its shape from config.json's n_layer, n_head,
/// n_embd, n_positions, vocab_size). A checkpoint's run config is <run_dir>/config.toml (two levels
/// up from step_N). Errors: CheckpointError, InteropError or ConfigError naming the path and what
/// is wrong (missing, neither format, a damaged checkpoint, a shape the file does not hold).
EvalWeights load_eval_weights(const std::string& path);

/// The tokenizer to encode text with and where it came from.
struct EvalTokenizer {
    Tokenizer tok;
    std::string source;  ///< "sentencepiece from X", "gpt2 from X"
    std::string note;    ///< how it was checked against the model's training data
};

/// The tokenizer of `tokenizer_path` (a token dataset .h5 with /tokenizer, a SentencePiece .model,
/// or a tiktoken ranks file: GPT-2's), else of `data_path` (a token dataset), else of the run's
/// data.train. Checked against the model: its vocabulary must fit model.vocab_size, and when the run
/// config names a readable data.train, its SHA-256 must be that file's tokenizer_sha256 (the
/// tokenizer the model trained with). Errors: ConfigError when there is no source (no run config
/// and neither flag: exit 2); DataError naming the file (unreadable, not a tokenizer) or both
/// hashes on a mismatch; ConfigError for a vocabulary larger than the model's.
EvalTokenizer resolve_eval_tokenizer(const EvalWeights& w, const std::string& tokenizer_path,
                                     const std::string& data_path);

}  // namespace llmtrain
