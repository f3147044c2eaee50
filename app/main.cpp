// app/main.cpp — the llmtrain command: parse the CLI, load the config, build the trainer, resume,
// prepare the run directory, train. Launch with `mpirun -np N llmtrain --config X` for N
// data-parallel ranks; a plain `llmtrain` is one rank.
//
// Exit codes (app/config/cli.hpp): 0 success, also after a SIGTERM/SIGINT stop with its checkpoint saved;
// 2 a bad command line or config (nothing is written); 1 any runtime error (data files, run dir,
// metrics port, checkpoint mismatch), reported as "llmtrain: error: ..." on stderr. Every check that
// can fail runs before the run directory is touched, and existing files are only appended to or
// replaced atomically, so a failed start loses nothing.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "app/checkpoint/checkpoint.hpp"
#include "app/config/cli.hpp"
#include "app/config/config.hpp"
#include "app/config/world.hpp"
#include "app/report/metrics.hpp"
#include "app/state/model_state.hpp"
#include "app/state/run_shape.hpp"
#include "app/plan/plan.hpp"
#include "app/resume_choice.hpp"
#include "app/report/run_log.hpp"
#include "app/shared_storage.hpp"
#include "app/plan/traffic.hpp"
#include "app/trainer.hpp"
#include "parallel/comm.hpp"
#include "parallel/node_report.hpp"
#include "parallel/nodes.hpp"

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

/// Prints config/'s warnings (resolve_world) on rank 0.
void print_warnings(const std::vector<std::string>& warnings, int rank) {
    if (rank == 0)
        for (const std::string& w : warnings) std::fprintf(stderr, "llmtrain: warning: %s\n", w.c_str());
}

/// pipeline.plan = "auto": rank 0 plans (app/plan/plan.hpp auto_plan) and broadcasts the per-stage lists,
/// or its error, which every rank then throws (a ConfigError, exit 2, when nothing fits; else exit 1).
/// The report goes to the log.
void plan_on_rank0(Config& cfg, Comm& comm, RunLog& log) {
    const int P = cfg.parallel.pp;
    std::vector<int32_t> lists(2 * size_t(P), 0);
    std::string err;
    if (comm.rank() == 0) {
        try {
            AutoPlan a = auto_plan(cfg, comm.size());
            for (const auto& l : a.report) log.line(l);
            std::copy(a.layers.begin(), a.layers.end(), lists.begin());
            std::copy(a.ckpt.begin(), a.ckpt.end(), lists.begin() + P);
        } catch (const ConfigError& e) {
            err = std::string("C") + e.what();  // first byte: the kind, so every rank exits with the same code
        } catch (const std::exception& e) {
            err = std::string("R") + e.what();
        }
    }
    broadcast_string(comm, err);
    if (!err.empty() && err[0] == 'C') throw ConfigError(err.substr(1));
    if (!err.empty()) throw std::runtime_error(err.substr(1));
    comm.broadcast(lists.data(), lists.size() * sizeof(int32_t), DType::u8, 0);
    cfg.pipeline.layers_per_stage.assign(lists.begin(), lists.begin() + P);
    cfg.activation_checkpoint.layers_per_stage.assign(lists.begin() + P, lists.end());
}

int run(const CliArgs& args) {
    Config cfg = load_config(args.config_path, args.overrides);
    if (args.world_size > 0) {  // --dry-run --world-size N: count one rank of an N-rank run, allocate nothing
        print_warnings(resolve_world(cfg, args.world_size, "--world-size " + std::to_string(args.world_size), false), 0);
        if (world_rank() == 0) {
            const RunShape shape = run_shape(cfg, args.world_size);  // the dry run reads this, not cfg's parallel keys
            for (const auto& l : memory_report(cfg, shape)) std::printf("%s\n", l.c_str());
            const int per_node = args.ranks_per_node > 0 ? args.ranks_per_node : args.world_size;
            for (const auto& l : traffic_report(step_traffic(shape, per_node))) std::printf("%s\n", l.c_str());
            if (cfg.pipeline.plan == "auto")
                std::printf("(pipeline.plan = \"auto\" chooses the split at start-up; this count is of the default "
                            "split: llmtrain-plan --world-size %d --pp %d prints the plan)\n", args.world_size,
                            shape.pp);
        }
        return kExitOk;
    }
    const int world = world_size(), rank = world_rank();
    print_warnings(resolve_world(cfg, world, "the number of ranks (" + std::to_string(world) + ")", true), rank);
    if (args.print_config) {
        if (rank == 0) std::fputs(to_toml(cfg).c_str(), stdout);
        return kExitOk;
    }

    install_stop_signal_handlers();
    auto comm = make_mpi_comm({}, CommOptions{cfg.parallel.timeout_s});
    // checkpoint.async is the config's on every rank: every HDF5 call holds h5::Lock (data/h5.hpp), so no
    // rank decides it from its local library; ranks started with different values are refused here,
    // before anything is written.
    float async_votes[2] = {cfg.checkpoint.async ? 1.0f : 0.0f, cfg.checkpoint.async ? 0.0f : 1.0f};
    comm->all_reduce_max(async_votes, 2);
    if (async_votes[0] == async_votes[1])
        throw ConfigError("checkpoint.async: true on some ranks and false on others; give every rank the same config");
    RunLog log(rank == 0);
    if (cfg.pipeline.plan == "auto") plan_on_rank0(cfg, *comm, log);
    // The one door: from here main and the trainer read the run's shape, its one Topology included.
    const RunShape shape = run_shape(cfg, world);
    Trainer trainer(cfg, shape, *comm);
    if (args.dry_run) {
        for (const auto& l : trainer.summary()) log.line(l);
        return kExitOk;
    }
    check_shared_run_dir(cfg.run.run_dir, *comm);  // before anything is written (exit 2 if a node sees another)
    // Rank 0 chooses, every rank verifies its share of the choice (app/resume_choice.hpp).
    const ResumeDecision resume = resume_choice(cfg, *comm);
    const std::string& ck = resume.dir;
    const std::vector<std::string>& ckpt_notes = resume.notes;
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
    for (const auto& l : node_report(shape.topology(rank), node_map(), shape.zero_stage)) log.line(l);
    for (const auto& l : ckpt_notes) log.line(l);
    const std::string& from = shape.init_from;
    const std::string weights = from.empty() ? "" : ", weights from model.init_from = " + from;
    log.line(resume_note.empty()
                 ? "start: from scratch" + weights + " (checkpoint.resume = \"" + cfg.checkpoint.resume + "\")"
                 : resume_note);
    try {
        trainer.run(log, metrics.get());
    } catch (const std::exception& e) {
        log.error(e.what());  // the run dir's log.txt says why the run stopped; main's fail() tells stderr
        throw;
    }
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
