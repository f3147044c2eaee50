// app/resume_choice.cpp — the resume checkpoint, chosen by rank 0 and verified by every rank
// (see resume_choice.hpp).
#include "app/resume_choice.hpp"

#include <map>

#include "app/checkpoint/checkpoint.hpp"
#include "parallel/nodes.hpp"

namespace llmtrain {

namespace {

/// "step_12" of ".../checkpoints/step_12".
std::string leaf(const std::string& dir) { return dir.substr(dir.find_last_of('/') + 1); }

}  // namespace

ResumeDecision resume_choice(const Config& cfg, Comm& comm) {
    const int rank = comm.rank(), world = comm.size();
    const double limit = cfg.checkpoint.timeout_s > 0 ? cfg.checkpoint.timeout_s : 1e9;
    ResumeDecision out;
    std::map<std::string, std::string> refused;  // rank 0: candidates some rank found damaged, and why
    // Everything but the SHA-256s, and the refusals: the lookup passes over a refused checkpoint as
    // over one that does not verify.
    const CheckpointCheck check = [&](const std::string& dir) {
        const auto r = refused.find(dir);
        return r != refused.end() ? r->second : checkpoint_problem(dir, 0, 0);
    };
    bool tidied = false;
    for (;;) {
        std::string pick;  // rank 0: "D<dir>" (empty dir: from scratch) or "E<error>"
        if (rank == 0) {
            try {
                run_busy("looking up the checkpoint to resume", limit, [&] {
                    if (!tidied) out.notes = recover_checkpoint_leftovers(cfg.run.run_dir);
                    tidied = true;
                    const ResumeChoice c =
                        resolve_resume(cfg.checkpoint.resume, cfg.run.run_dir, cfg.checkpoint.overwrite, check);
                    pick = "D" + c.dir;
                    for (const auto& s : c.skipped) out.notes.push_back(s);
                });
            } catch (const std::exception& e) {
                pick = std::string("E") + e.what();
            }
        }
        broadcast_string(comm, pick);
        if (pick[0] == 'E') throw CheckpointError(pick.substr(1));
        out.dir = pick.substr(1);
        if (out.dir.empty()) return out;
        // Every rank hashes its share; the lowest rank that found a problem tells rank 0 why.
        std::string why;
        run_busy("verifying checkpoint " + leaf(out.dir), limit,
                 [&] { why = checkpoint_problem(out.dir, rank, world); });
        float first_bad = why.empty() ? 0.0f : float(world - rank);  // max = the lowest bad rank
        comm.all_reduce_max(&first_bad, 1);
        if (first_bad == 0) return out;
        broadcast_string(comm, why, world - int(first_bad));
        if (rank == 0) {
            refused[out.dir] = why;
            out.notes.push_back("checkpoint: " + leaf(out.dir) + " failed the ranks' shared verification (" + why +
                                "); looking again");
        }
    }
}

}  // namespace llmtrain
