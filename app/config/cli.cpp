// app/config/cli.cpp — argv parsing for llmtrain with CLI11 (header-only, /usr/include/CLI).
#include "app/config/cli.hpp"

#include <CLI/CLI.hpp>
#include <iostream>

#include "app/config/cli_positive.hpp"

namespace llmtrain {

CliArgs parse_cli(int argc, const char* const* argv) {
    CliArgs args;
    CLI::App app{"llmtrain: GPT-2 pretraining (see docs/configuration.md for every config key)", "llmtrain"};
    app.add_option("--config", args.config_path, "TOML config file (built-in defaults when omitted)")
        ->option_text("PATH");
    // One value per --set; repeat the flag for more overrides (a later one wins).
    app.add_option("--set", args.overrides,
                   "override one key, value in TOML syntax: --set run.max_steps=50 "
                   "--set training.precision='\"bf16\"'")
        ->option_text("SECTION.KEY=VALUE")
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_flag("--print-config", args.print_config, "print the resolved config as TOML and exit");
    auto* dry = app.add_flag("--dry-run", args.dry_run, "print the start-up summary (model, memory, schedule) and exit");
    auto* world = app.add_option("--world-size", args.world_size,
                                 "with --dry-run: per-rank memory of an N-rank run at every ZeRO stage and its "
                                 "bytes per step by group, without allocating (no data files needed)")
                      ->check(kPositive)
                      ->needs(dry);
    app.add_option("--ranks-per-node", args.ranks_per_node,
                   "with --world-size: ranks per node (a divisor of N; default N, one node): which groups span "
                   "nodes and the bytes per step that cross them")
        ->check(kPositive)
        ->needs(world);
    app.set_version_flag("--version", std::string("llmtrain ") + kVersion);
    try {
        app.parse(argc, argv);
        if (args.ranks_per_node > 0 && args.world_size % args.ranks_per_node != 0)
            throw CLI::ValidationError("--ranks-per-node", "expected a divisor of --world-size " +
                                                               std::to_string(args.world_size) + ", got " +
                                                               std::to_string(args.ranks_per_node));
    } catch (const CLI::CallForHelp& e) {
        std::cout << app.help();
        args.exit_now = true;
        args.exit_code = kExitOk;
    } catch (const CLI::CallForVersion& e) {
        std::cout << e.what() << "\n";
        args.exit_now = true;
        args.exit_code = kExitOk;
    } catch (const CLI::ParseError& e) {
        std::cerr << "llmtrain: " << e.what() << "\nRun with --help for the usage.\n";
        args.exit_now = true;
        args.exit_code = kExitUsage;
    }
    return args;
}

}  // namespace llmtrain
