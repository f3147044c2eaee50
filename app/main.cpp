// app/main.cpp — the llmtrain command: parse the CLI, load the config, build the trainer, resume,
// prepare the run directory, train. Launch with `mpirun -np N llmtrain --config X` for N
// data-parallel ranks; a plain `llmtrain` is one rank.
//
// Exit codes (app/cli.hpp): 0 success, also after a SIGTERM/SIGINT stop with its checkpoint saved;
// 2 a bad command line or config (nothing is written); 1 any runtime error (data files, run dir,
// metrics port, checkpoint mismatch), reported as "llmtrain: error: ..." on stderr. Every check that
// can fail runs before the run directory is touched, and existing files are only appended to or
// replaced atomically, so a failed start loses nothing.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "app/checkpoint.hpp"
#include "app/cli.hpp"
#include "app/config.hpp"
#include "app/metrics.hpp"
#include "app/run_log.hpp"
#include "app/trainer.hpp"
#include "parallel/comm.hpp"

using namespace llmtrain;

namespace {

/// Creates the run directory, starts log.txt/losses.tsv (append) and writes config.toml through a
/// temporary file and a rename. Errors: std::runtime_error naming the path.
void prepare_run_dir(const Config& cfg, RunLog& log) {
    namespace fs = std::filesystem;
    const fs::path dir(cfg.run.run_dir);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
        throw std::runtime_error("run dir '" + dir.string() + "': cannot create: " +
                                 (ec ? ec.message() : std::string("not a directory")));
    log.open(dir.string());
    const fs::path tmp = dir / "config.toml.tmp";
    {
        std::ofstream f(tmp, std::ios::trunc);
        f << to_toml(cfg);
        f.flush();
        if (!f) throw std::runtime_error("cannot write '" + tmp.string() + "'");
    }
    fs::rename(tmp, dir / "config.toml", ec);
    if (ec) throw std::runtime_error("cannot rename '" + tmp.string() + "' to config.toml: " + ec.message());
}

/// "127.0.0.1:9400" -> "127.0.0.1" (the host part of metrics.listen).
std::string listen_host(const std::string& listen) { return listen.substr(0, listen.rfind(':')); }

int run(const CliArgs& args) {
    Config cfg = load_config(args.config_path, args.overrides);
    const int world = world_size(), rank = world_rank();
    if (cfg.parallel.dp == 0) cfg.parallel.dp = world;
    if (cfg.parallel.dp != world)
        throw ConfigError("parallel.dp: expected the number of ranks (" + std::to_string(world) + "), got " +
                          std::to_string(cfg.parallel.dp) + " (pipeline and ZeRO groups come later)");
    resolve_batch(cfg, cfg.parallel.dp);
    if (args.print_config) {
        if (rank == 0) std::fputs(to_toml(cfg).c_str(), stdout);
        return kExitOk;
    }

    install_stop_signal_handlers();
    auto comm = make_mpi_comm();
    RunLog log(rank == 0);
    Trainer trainer(cfg, *comm);
    if (args.dry_run) {
        for (const auto& l : trainer.summary()) log.line(l);
        return kExitOk;
    }
    const std::string ck = resolve_resume(cfg.checkpoint.resume, cfg.run.run_dir);
    const std::string resume_note = ck.empty() ? "" : trainer.resume_from(ck);
    std::unique_ptr<Metrics> metrics;
    if (cfg.metrics.enabled) {
        metrics = std::make_unique<Metrics>(cfg.metrics.listen, local_rank(), cfg.run.name, rank);
        const std::string url =
            "http://" + listen_host(cfg.metrics.listen) + ":" + std::to_string(metrics->port()) + "/metrics";
        if (rank == 0)
            log.line("metrics: listening on " + url);
        else
            std::printf("metrics (rank %d): listening on %s\n", rank, url.c_str());
    }
    if (rank == 0) prepare_run_dir(cfg, log);
    comm->barrier();  // the run dir exists before any rank goes on
    for (const auto& l : trainer.summary()) log.line(l);
    log.line(resume_note.empty() ? "start: from scratch (checkpoint.resume = \"" + cfg.checkpoint.resume + "\")"
                                 : resume_note);
    trainer.run(log, metrics.get());
    return kExitOk;
}

/// Prints the error and ends the process with `code` (every rank of a multi-rank job).
int fail(const char* what, int code) {
    std::fprintf(stderr, "llmtrain: error: %s\n", what);
    std::fflush(stderr);
    if (world_size() > 1) mpi_abort(code);
    return code;
}

}  // namespace

int main(int argc, char** argv) {
    CliArgs args = parse_cli(argc, argv);
    if (args.exit_now) return args.exit_code;
    int code = kExitOk;
    try {
        mpi_init_once(&argc, &argv);
        code = run(args);
    } catch (const ConfigError& e) {
        code = fail(e.what(), kExitUsage);
    } catch (const std::exception& e) {
        code = fail(e.what(), kExitFailure);
    }
    mpi_finalize();
    return code;
}
