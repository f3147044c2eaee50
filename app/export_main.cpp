// app/export_main.cpp — llmtrain-export: a checkpoint's weights in another tool's format
// (docs/training.md "Weight formats").
//
//   llmtrain-export CHECKPOINT --format hf|llmc [--dtype fp32|bf16] OUT
//
// CHECKPOINT is a checkpoint directory (runs/x/checkpoints/step_N) or a run directory (its newest
// checkpoint that verifies). hf writes OUT/model.safetensors + OUT/config.json (HuggingFace
// GPT2LMHeadModel); llmc writes the file OUT in llm.c's model format (version 3 fp32, 5 bf16).
// Exit codes as llmtrain's (app/cli.hpp): 0 written, 1 a bad checkpoint or an I/O failure, 2 bad flags.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "app/checkpoint/checkpoint.hpp"
#include "app/cli.hpp"
#include "app/interop/hf_gpt2.hpp"
#include "app/interop/llmc_model.hpp"

using namespace llmtrain;

namespace {

/// The checkpoint directory `arg` names: itself when it holds a state.toml, else the newest
/// verifying checkpoint of the run directory. Errors: CheckpointError naming the path and why.
std::string checkpoint_dir(const std::string& arg) {
    namespace fs = std::filesystem;
    std::string dir = arg;
    if (!fs::exists(fs::path(arg) / "state.toml")) {
        dir = find_resume_checkpoint(arg).dir;  // latest's when it verifies, as resume = "auto" takes it
        if (dir.empty())
            throw CheckpointError(arg + ": neither a checkpoint directory (no state.toml) nor a run directory "
                                        "with a checkpoint that verifies");
    }
    if (const std::string why = checkpoint_problem(dir); !why.empty())
        throw CheckpointError("checkpoint '" + dir + "': " + why);
    return dir;
}

}  // namespace

int main(int argc, char** argv) {
    std::string in, out, format, dtype = "fp32";
    CLI::App app{"llmtrain-export: write a checkpoint's weights as a HuggingFace GPT-2 (model.safetensors + "
                 "config.json) or an llm.c model file", "llmtrain-export"};
    app.add_option("CHECKPOINT", in, "checkpoint directory (step_N) or run directory (its newest checkpoint)")
        ->required();
    app.add_option("OUT", out, "hf: the directory to write; llmc: the file to write")->required();
    app.add_option("--format", format, "hf | llmc")->required()->check(CLI::IsMember({"hf", "llmc"}));
    app.add_option("--dtype", dtype, "fp32 | bf16 (rounded to nearest even); default fp32")
        ->check(CLI::IsMember({"fp32", "bf16"}));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? kExitOk : kExitUsage;
    }
    try {
        const std::string dir = checkpoint_dir(in);
        const TrainState st = read_train_state(dir);
        const ParamLayout layout(st.model);
        std::vector<float> params(layout.total_numel());
        read_params(dir, layout, params.data());
        if (format == "hf") write_hf_gpt2(out, layout, params.data(), dtype == "bf16" ? "BF16" : "F32");
        else write_llmc_model(out, layout, params.data(), dtype == "bf16");
        std::printf("llmtrain-export: wrote %s (%s, %s, %zu parameters) from %s (step %lld)\n", out.c_str(),
                    format.c_str(), dtype.c_str(), layout.num_parameters(), dir.c_str(), (long long)st.step);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llmtrain-export: error: %s\n", e.what());
        return kExitFailure;
    }
    return kExitOk;
}
