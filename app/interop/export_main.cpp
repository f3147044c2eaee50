// app/interop/export_main.cpp — llmtrain-export: a checkpoint's weights in another tool's format
// (docs/checkpoints.md "Weight formats").
//
//   llmtrain-export CHECKPOINT --format hf|llmc [--dtype fp32|bf16] [--shard-mb MB] [--bos-id N]
//                   [--eos-id N] OUT
//
// CHECKPOINT is a checkpoint directory (runs/x/checkpoints/step_N) or a run directory (its newest
// checkpoint that verifies). hf writes OUT/model.safetensors + OUT/config.json (HuggingFace
// GPT2LMHeadModel, or LlamaForCausalLM for model.arch = "llama", MixtralForCausalLM for a Llama with
// model.moe (a softmax router, no shared experts; app/interop/hf_moe.hpp), whose weights above --shard-mb
// become model-0000k-of-0000n.safetensors + model.safetensors.index.json); llmc writes the file OUT
// in llm.c's model format (version 3 fp32, 5 bf16; GPT-2 only).
// Exit codes as llmtrain's (app/config/cli.hpp): 0 written, 1 a bad checkpoint or an I/O failure, 2 bad flags.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "app/checkpoint/checkpoint.hpp"
#include "app/config/cli.hpp"
#include "app/config/config.hpp"
#include "app/interop/checkpoint_model.hpp"
#include "app/interop/hf_gpt2.hpp"
#include "app/interop/hf_llama.hpp"
#include "app/interop/llmc_model.hpp"
#include "data/token_dataset.hpp"

using namespace llmtrain;

namespace {

/// The checkpoint directory `arg` names (checkpoint_named: the one resume would take from a run
/// directory). Errors: CheckpointError naming the path and why.
std::string checkpoint_dir(const std::string& arg) {
    const std::string dir = checkpoint_named(arg);
    if (dir.empty())
        throw CheckpointError(arg + ": neither a checkpoint directory (no state.toml) nor a run directory "
                                    "(no checkpoints/)");
    return dir;
}

/// The bos/eos ids of the run's training data (<run>/config.toml's data.train, two levels above
/// step_N), or {-1, -1} when there is no readable run config or dataset: best effort, never an error.
std::pair<int, int> data_specials(const std::string& ckpt) {
    namespace fs = std::filesystem;
    try {
        const fs::path cfg = fs::path(ckpt).parent_path().parent_path() / "config.toml";
        if (!fs::exists(cfg)) return {-1, -1};
        const Config c = load_config(cfg.string(), {});
        if (!fs::exists(c.data.train)) return {-1, -1};
        const DatasetInfo& info = TokenDataset(c.data.train).info();
        return {info.bos_id, info.eos_id};
    } catch (const std::exception&) {
        return {-1, -1};
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string in, out, format, dtype = "fp32";
    double shard_mb = 5000;  // HF's default max_shard_size, 5GB
    int bos = -2, eos = -2;  // -2: from the run's data
    CLI::App app{"llmtrain-export: write a checkpoint's weights as a HuggingFace GPT-2 or Llama (safetensors + "
                 "config.json) or an llm.c model file", "llmtrain-export"};
    app.add_option("CHECKPOINT", in, "checkpoint directory (step_N) or run directory (its newest checkpoint)")
        ->required();
    app.add_option("OUT", out, "hf: the directory to write; llmc: the file to write")->required();
    app.add_option("--format", format, "hf | llmc")->required()->check(CLI::IsMember({"hf", "llmc"}));
    app.add_option("--dtype", dtype, "fp32 | bf16 (rounded to nearest even); default fp32")
        ->check(CLI::IsMember({"fp32", "bf16"}));
    app.add_option("--shard-mb", shard_mb, "hf, Llama: shards of at most this many MB (10^6 bytes) above it; "
                   "default 5000")->check(CLI::PositiveNumber);
    app.add_option("--bos-id", bos, "hf, Llama: config.json bos_token_id (-1: null); default the run data's")
        ->check(CLI::Range(-1, 1 << 30));
    app.add_option("--eos-id", eos, "hf, Llama: config.json eos_token_id (-1: null); default the run data's")
        ->check(CLI::Range(-1, 1 << 30));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? kExitOk : kExitUsage;
    }
    try {
        const std::string dir = checkpoint_dir(in);
        const TrainState st = read_train_state(dir);
        const GPTConfig model = checkpoint_model_config(dir, st);  // arch and Llama keys from the run's config
        const ParamLayout layout(model);
        std::vector<float> params(layout.total_numel());
        read_params(dir, layout, params.data());
        const std::string st_dtype = dtype == "bf16" ? "BF16" : "F32";
        const bool llama = model.arch == Arch::llama;
        if (format == "hf" && llama) {
            HfLlamaOut o;
            o.dtype = st_dtype;
            o.max_shard_bytes = std::max<uint64_t>(1, uint64_t(shard_mb * 1e6));
            const auto [data_bos, data_eos] = bos == -2 || eos == -2 ? data_specials(dir) : std::pair{-1, -1};
            o.bos_id = bos == -2 ? data_bos : bos;
            o.eos_id = eos == -2 ? data_eos : eos;
            write_hf_llama(out, layout, params.data(), o);
        } else if (format == "hf") {
            write_hf_gpt2(out, layout, params.data(), st_dtype);
        } else if (llama) {
            throw InteropError(out + ": --format llmc writes llm.c's GPT-2 model file; this checkpoint is "
                               "model.arch = \"llama\" (use --format hf)");
        } else {
            write_llmc_model(out, layout, params.data(), dtype == "bf16");
        }
        std::printf("llmtrain-export: wrote %s (%s, %s, %zu parameters) from %s (step %lld)\n", out.c_str(),
                    format.c_str(), dtype.c_str(), layout.num_parameters(), dir.c_str(), (long long)st.step);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llmtrain-export: error: %s\n", e.what());
        return kExitFailure;
    }
    return kExitOk;
}
