// app/checkpoint/lookup.cpp — which checkpoint a run dir means: the run it continues (current_run_id),
// the newest verified checkpoint of a run, the one resume follows (`latest` first) and
// checkpoint.resume's resolution (see checkpoint.hpp, docs/checkpoints.md "Resume").
#include <algorithm>
#include <fstream>
#include <optional>

#include "app/checkpoint/checkpoint.hpp"
#include "app/checkpoint/format.hpp"

namespace llmtrain {

using namespace ckpt;

std::string full_check(const std::string& dir) { return checkpoint_problem(dir); }

std::optional<std::string> current_run_id(const std::string& run_dir, const CheckpointCheck& check) {
    const fs::path ckdir = fs::path(run_dir) / "checkpoints";
    std::string target;
    std::ifstream(ckdir / "latest") >> target;
    if (step_of(target) >= 0) {
        try {
            return read_state_file((ckdir / target).string()).st.run_id;
        } catch (const CheckpointError&) {
            // damaged or missing: fall back to the newest checkpoint that verifies
        }
    }
    const auto all = step_dirs(ckdir);
    for (auto it = all.rbegin(); it != all.rend(); ++it)
        if (check(it->second.string()).empty()) return read_state_file(it->second.string()).st.run_id;
    return std::nullopt;
}

ResumeChoice find_latest_checkpoint(const std::string& run_dir, const std::string& run_id, const CheckpointCheck& check) {
    ResumeChoice c;
    const auto all = step_dirs(fs::path(run_dir) / "checkpoints");
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        const std::string d = it->second.string(), name = it->second.filename().string();
        std::string why;
        try {
            const std::string other = read_state_file(d).st.run_id;
            why = other == run_id ? check(d) : "belongs to run " + other + ", not " + run_id;
        } catch (const CheckpointError& e) {
            why = e.what();
        }
        if (why.empty()) {
            c.dir = d;
            c.run_id = run_id;
            return c;
        }
        c.skipped.push_back("skipped " + name + ": " + why);
    }
    return c;
}

ResumeChoice find_resume_checkpoint(const std::string& run_dir, const CheckpointCheck& check) {
    const fs::path ckdir = fs::path(run_dir) / "checkpoints";
    std::string target;
    std::ifstream(ckdir / "latest") >> target;
    std::string why;  // why `latest` is not followed
    if (target.empty()) {
        why = "checkpoints/latest is missing or empty";
    } else if (step_of(target) < 0) {
        why = "checkpoints/latest names '" + target + "', not a step_<N>";
    } else {
        const fs::path dir = ckdir / target;
        std::error_code ec;
        why = fs::is_directory(dir, ec) ? check(dir.string()) : "it does not exist";
        if (why.empty()) {
            ResumeChoice c{dir.string(), read_state_file(dir.string()).st.run_id, {}};
            for (const auto& [step, p] : step_dirs(ckdir)) {  // newer ones: abandoned by a rollback, or never published
                if (step <= step_of(target)) continue;
                std::string note;
                try {
                    const std::string other = read_state_file(p.string()).st.run_id;
                    note = other == c.run_id ? "newer than " + target +
                                                   ", which checkpoints/latest names (the checkpoint written last)"
                                             : "belongs to run " + other + ", not " + c.run_id;
                } catch (const CheckpointError& e) {
                    note = e.what();
                }
                c.skipped.push_back("skipped " + p.filename().string() + ": " + note);
            }
            std::reverse(c.skipped.begin(), c.skipped.end());  // newest first, like find_latest_checkpoint
            return c;
        }
        why = "checkpoints/latest names " + target + ", which does not verify (" + why + ")";
    }
    const auto rid = current_run_id(run_dir, check);
    ResumeChoice c;
    if (rid) c = find_latest_checkpoint(run_dir, *rid, check);
    c.skipped.insert(c.skipped.begin(), "checkpoint: " + why + "; taking the newest checkpoint of the run that verifies");
    return c;
}

std::string checkpoint_named(const std::string& path) {
    std::error_code ec;
    std::string dir = path;
    if (!fs::exists(fs::path(path) / "state.toml", ec)) {
        if (!fs::is_directory(fs::path(path) / "checkpoints", ec)) return "";
        const ResumeChoice c = find_resume_checkpoint(path);
        if (c.dir.empty()) {
            std::string why;
            for (const auto& s : c.skipped) why += "\n  " + s;
            throw CheckpointError(path + ": a run directory without a checkpoint that verifies" + why);
        }
        dir = c.dir;
    }
    if (const std::string why = checkpoint_problem(dir); !why.empty())
        throw CheckpointError("checkpoint '" + dir + "': " + why);
    return dir;
}

ResumeChoice resolve_resume(const std::string& resume, const std::string& run_dir, bool overwrite,
                            const CheckpointCheck& check) {
    const auto all = step_dirs(fs::path(run_dir) / "checkpoints");
    if (resume == "none") {
        if (all.empty() || overwrite) return {};
        const auto rid = current_run_id(run_dir, check);
        const ResumeChoice c = rid ? find_resume_checkpoint(run_dir, check) : ResumeChoice{};
        const std::string which = rid ? "of run " + (rid->empty() ? std::string("(format 1)") : *rid) + " (it continues from " +
                                            fs::path(c.dir).filename().string() + ")"
                                      : "(none of them verifies)";
        throw CheckpointError("run dir " + run_dir + " already holds checkpoints " + which +
                              "; set checkpoint.resume = \"auto\" to continue it or checkpoint.overwrite = true to "
                              "start a new run there");
    }
    if (resume == "auto") {
        if (all.empty()) return {};
        ResumeChoice c = find_resume_checkpoint(run_dir, check);
        if (!c.dir.empty()) return c;
        if (!current_run_id(run_dir, check)) {  // no run to follow: say why each step_<N> fails
            for (auto it = all.rbegin(); it != all.rend(); ++it)
                c.skipped.push_back("skipped " + it->second.filename().string() + ": " +
                                    check(it->second.string()));
        }
        std::string why;
        for (const auto& s : c.skipped) why += "\n  " + s;
        throw CheckpointError("checkpoint.resume = \"auto\": no checkpoint in " + run_dir +
                              "/checkpoints verifies:" + why +
                              "\nset checkpoint.resume = \"none\" and checkpoint.overwrite = true to start a new run there");
    }
    std::error_code ec;
    if (!fs::is_directory(resume, ec))
        throw CheckpointError("checkpoint.resume: '" + resume + "' is not a directory");
    const std::string why = check(resume);
    if (!why.empty()) throw CheckpointError("checkpoint.resume: '" + resume + "' is not a complete checkpoint (" + why + ")");
    return ResumeChoice{resume, read_state_file(resume).st.run_id, {}};
}

}  // namespace llmtrain
