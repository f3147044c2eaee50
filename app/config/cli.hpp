// app/config/cli.hpp — the llmtrain command line (CLI11): which config to load, overrides, and what to do.
//
// llmtrain [--config PATH] [--set section.key=value]... [--print-config]
//          [--dry-run [--world-size N [--ranks-per-node R]]]
// --help and --version print and exit 0; an unknown flag or a missing value exits 2 (kExitUsage).
// The config itself is loaded by the caller with load_config(config_path, overrides).
#pragma once
#include <string>
#include <vector>

namespace llmtrain {

/// Process exit codes of llmtrain (docs/configuration.md "Exit codes").
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  ///< a runtime failure (data, I/O, numerics, communication)
constexpr int kExitUsage = 2;    ///< bad command line or bad config (ConfigError): nothing is written

/// The version printed by --version.
constexpr const char* kVersion = "0.1.0";

struct CliArgs {
    std::string config_path;             ///< --config; empty: built-in defaults only
    std::vector<std::string> overrides;  ///< --set values in command-line order ("section.key=value")
    bool print_config = false;           ///< --print-config: print the resolved config as TOML, exit 0
    bool dry_run = false;                ///< --dry-run: print the start-up summary, exit 0
    int world_size = 0;                  ///< --world-size N (with --dry-run): estimate an N-rank run's memory
    /// --ranks-per-node R (with --world-size): ranks per node for the step-traffic table (app/plan/traffic.hpp);
    /// 0 when not given: one node of world_size ranks. Checked to divide world_size.
    int ranks_per_node = 0;
    bool exit_now = false;               ///< --help/--version handled or a usage error: exit with exit_code
    int exit_code = kExitOk;
};

/// Parses argv. --help/--version print to stdout and set exit_now with kExitOk; a usage error
/// (unknown flag, missing value, stray positional argument, --ranks-per-node not dividing --world-size)
/// prints the error and a hint to stderr and sets exit_now with kExitUsage. Never throws, never exits the process itself.
CliArgs parse_cli(int argc, const char* const* argv);

}  // namespace llmtrain
