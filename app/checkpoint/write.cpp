// app/checkpoint/write.cpp — the checkpoint write protocol (see checkpoint.hpp): temporary directory,
// one optimizer shard file per rank and model.h5 (whole from one writer, or sealed from the ranks'
// slices: app/checkpoint/model_slices.cpp), checksummed state.toml, atomic publication, pruning and start-up recovery. HDF5 through data/h5.hpp; state.toml through TOML++.
#include <hdf5.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <exception>
#include <memory>
#include <thread>
#include <random>
#include <sstream>
#include <toml++/toml.h>

#include "app/checkpoint/checkpoint.hpp"
#include "app/checkpoint/format.hpp"
#include "app/checkpoint/raw_h5.hpp"
#include "data/h5.hpp"
#include "model/arch.hpp"

namespace llmtrain {

namespace ckpt {

void fs_op() {
    static const long kill_at = [] {
        const char* e = std::getenv("LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP");
        return e ? std::atol(e) : 0L;
    }();
    static std::atomic<long> count{0};
    if (++count == kill_at) std::raise(SIGKILL);
}

int64_t step_of(const std::string& name) {
    if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 23) return -1;
    for (size_t i = 5; i < name.size(); ++i)
        if (name[i] < '0' || name[i] > '9') return -1;
    return std::stoll(name.substr(5));
}

std::vector<fs::path> list_dir(const fs::path& dir) {
    std::vector<fs::path> out;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) return out;  // holds nothing
    for (const fs::directory_iterator end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
    if (ec) throw CheckpointError("checkpoint: cannot list '" + dir.string() + "': " + ec.message());
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::pair<int64_t, fs::path>> step_dirs(const fs::path& ckdir) {
    std::vector<std::pair<int64_t, fs::path>> out;
    for (const fs::path& p : list_dir(ckdir)) {
        std::error_code ec;  // an entry gone since the listing is simply not there
        const int64_t s = step_of(p.filename().string());
        if (s >= 0 && fs::is_directory(p, ec)) out.emplace_back(s, p);
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string state_to_toml(const TrainState& st, const std::vector<PartInfo>& files) {
    toml::table sums, sizes, sliced;
    for (const PartInfo& f : files) {
        sums.insert(f.name, f.sha256);
        sizes.insert(f.name, int64_t(f.bytes));
        if (f.slices.empty()) continue;
        toml::array a;  // [lo, hi, "sha256"] per slice, ascending
        for (const ByteSlice& b : f.slices) a.push_back(toml::array{int64_t(b.lo), int64_t(b.hi), b.sha256});
        sliced.insert(f.name, std::move(a));
    }
    toml::table model{{"config_hash", st.model_config_hash},
                      {"n_layer", st.model.n_layer},
                      {"n_head", st.model.n_head},
                      {"n_embd", st.model.n_embd},
                      {"seq_len", st.model.seq_len},
                      {"vocab_size", st.model.vocab_size}};
    if (st.model.arch != Arch::gpt2) {  // the rest of the architecture, resolved (GPT-2's keys say it all)
        const ArchSpec spec(st.model);
        model.insert("arch", std::string(arch_name(st.model.arch)));
        model.insert("n_kv_head", spec.NKV);
        model.insert("intermediate_size", spec.F);
        model.insert("tie_embeddings", spec.tied);
        model.insert("rope_theta", double(spec.rope_theta));
        model.insert("norm_eps", double(spec.norm_eps));
    }
    toml::table loader{{"sample", int64_t(st.loader.sample)}, {"seed", int64_t(st.loader.seed)}};
    if (!st.loader.sources.empty()) {  // a mixture: [[loader.sources]] (data/loader.hpp SourceState)
        toml::array sources;
        for (const SourceState& s : st.loader.sources)
            sources.push_back(toml::table{{"name", s.name}, {"weight", s.weight}, {"position", int64_t(s.position)},
                                          {"drawn", int64_t(s.drawn)}});
        loader.insert("sources", std::move(sources));
    }
    toml::table identity;  // every key that changes the model's function, as the trainer gave them
    for (const auto& [k, v] : st.model_identity) identity.insert(k, v);
    toml::table t{
        {"format_version", kFormatVersion},
        {"run_id", st.run_id},
        {"step", st.step},
        {"tokens_seen", int64_t(st.tokens_seen)},
        {"restarts", st.restarts},
        {"adam_t", st.adam_t},
        {"loader", std::move(loader)},
        {"sampler_rng", st.sampler_rng},
        {"model", std::move(model)},
        {"world", toml::table{{"dp", st.dp}, {"world_size", st.world_size}}},
        {"backend", toml::table{{"name", st.backend}, {"precision", st.precision}}},
        {"files", std::move(sums)},
        {"bytes", std::move(sizes)},
    };
    if (!sliced.empty()) t.insert("slices", std::move(sliced));
    if (!identity.empty()) t.insert("model_identity", std::move(identity));
    if (!st.moe_bias.empty()) {  // [moe] bias: one row of E per layer
        toml::array rows;
        const size_t E = size_t(st.moe_experts);
        for (size_t r = 0; r * E < st.moe_bias.size(); ++r) {
            toml::array row;
            for (size_t e = 0; e < E; ++e) row.push_back(double(st.moe_bias[r * E + e]));
            rows.push_back(std::move(row));
        }
        t.insert("moe", toml::table{{"bias", std::move(rows)}});
    }
    std::ostringstream os;
    os << "# llmtrain checkpoint state (written last: its presence marks a complete checkpoint)\n" << t << "\n\n";
    const std::string body = os.str();
    return body + kIntegrityHeader + "state_sha256 = \"" + sha256_hex(body) + "\"  # of every byte above\n";
}

}  // namespace ckpt

namespace {

using namespace ckpt;

void sync(const fs::path& p) {
    fs_op();
    h5::fsync_path<CheckpointError>(p.string());
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
    fs_op();
    std::error_code ec;
    fs::rename(from, to, ec);
    if (ec) throw CheckpointError("checkpoint: cannot rename '" + from.string() + "' to '" + to.string() + "': " + ec.message());
}

/// Removes a directory tree or file; errors are ignored (pruning and clean-up must not fail a run).
void remove_quiet(const fs::path& p) {
    fs_op();
    std::error_code ec;
    fs::remove_all(p, ec);
}

/// Removes a directory tree or file that must go before the protocol goes on (`what` says what it
/// is, for the message). Errors: CheckpointError naming the path and the OS reason.
void remove_or_throw(const fs::path& p, const std::string& what) {
    fs_op();
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec) throw CheckpointError("checkpoint: cannot remove '" + p.string() + "' (" + what + "): " + ec.message());
}

/// Creates dir and every missing parent; after each directory is made, its parent is fsynced so
/// that the new entry survives a crash (e.g. run_dir after checkpoints/ is made in it).
/// Errors: CheckpointError naming dir, the component that could not be made and the OS reason.
void create_dirs_durable(const fs::path& dir) {
    std::vector<fs::path> missing;  // innermost first
    std::error_code ec;
    for (fs::path p = dir; !fs::is_directory(p, ec); p = p.parent_path()) {
        missing.push_back(p);
        if (!p.has_parent_path() || p.parent_path() == p) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        fs_op();
        fs::create_directory(*it, ec);  // false without an error when someone else made it meanwhile
        if (ec)
            throw CheckpointError("checkpoint: cannot create '" + dir.string() + "'" +
                                  (*it == dir ? "" : " ('" + it->string() + "')") + ": " + ec.message());
        sync(it->has_parent_path() ? it->parent_path() : fs::path("."));
    }
}

/// Writes text to path (truncating) and fsyncs it.
void write_text_synced(const fs::path& p, const std::string& text) {
    fs_op();
    {
        std::ofstream f(p, std::ios::binary | std::ios::trunc);
        f << text;
        f.flush();
        if (!f) throw CheckpointError("checkpoint: cannot write '" + p.string() + "'");
    }
    sync(p);
}

}  // namespace

std::string new_run_id() {
    std::random_device rd;
    static const char* hex = "0123456789abcdef";
    std::string id;
    for (int i = 0; i < 4; ++i) {
        uint32_t w = rd();
        for (int j = 0; j < 8; ++j, w >>= 4) id += hex[w & 15];
    }
    return id;
}

std::string checkpoint_tmp_dir(const std::string& run_dir, int64_t step) {
    return (fs::path(run_dir) / "checkpoints" / (".tmp_step_" + std::to_string(step))).string();
}

std::string begin_checkpoint(const std::string& run_dir, int64_t step) {
    const fs::path ckdir = fs::path(run_dir) / "checkpoints", tmp = checkpoint_tmp_dir(run_dir, step);
    std::error_code ec;
    create_dirs_durable(ckdir);  // run_dir fsynced once checkpoints/ is made in it
    if (fs::exists(fs::symlink_status(tmp, ec)))
        remove_or_throw(tmp, "a leftover of an earlier attempt at this step");
    fs_op();
    if (!fs::create_directory(tmp, ec))
        throw CheckpointError("checkpoint: cannot create '" + tmp.string() + "': " +
                              (ec ? ec.message() : std::string("it already exists")));
    return tmp.string();
}

namespace ckpt {

std::vector<RawDataset> model_datasets(const ParamLayout& layout) {
    std::vector<RawDataset> ds;
    for (const auto& t : layout.tensors()) ds.push_back({"", t.name, std::vector<hsize_t>(t.shape.begin(), t.shape.end())});
    return ds;
}

void require_finite(const float* x, size_t n, const std::string& what) {
    if (all_finite(x, n)) return;  // the vectorized pass; the loop below only names the element
    for (size_t i = 0; i < n; ++i)
        if (!std::isfinite(x[i]))
            throw CheckpointError("checkpoint: " + what + " holds a non-finite value (" +
                                  (std::isnan(x[i]) ? "nan" : "inf") + ") at element " + std::to_string(i) +
                                  "; refusing to checkpoint it");
}

}  // namespace ckpt

PartInfo write_model_file(const std::string& tmp_dir, const ParamLayout& layout, const std::vector<OptimShardView>& views) {
    const fs::path p = fs::path(tmp_dir) / "model.h5";
    std::vector<RawDataset> ds = model_datasets(layout);
    const auto& ts = layout.tensors();
    for (size_t i = 0; i < ts.size(); ++i) {
        const ParamTensor& t = ts[i];
        for (const OptimShardView& s : views)
            if (s.w && s.begin <= t.offset && t.offset + t.numel <= s.end) ds[i].data = s.w + (t.offset - s.begin);
        if (!ds[i].data)
            throw CheckpointError("checkpoint: " + p.string() + ": tensor " + t.name +
                                  " is not whole in the weights given (write model parts instead)");
        require_finite(ds[i].data, t.numel, t.name);
    }
    return RawH5File(p, std::move(ds)).write_all();
}

PartInfo describe_part(const std::string& tmp_dir, const std::string& name) {
    const fs::path p = fs::path(tmp_dir) / name;
    std::error_code ec;
    const uintmax_t n = fs::file_size(p, ec);
    if (ec) throw CheckpointError("checkpoint: cannot read the size of '" + p.string() + "': " + ec.message());
    try {
        return PartInfo{name, uint64_t(n), sha256_file_hex(p.string()), {}};
    } catch (const DataError& e) {
        throw CheckpointError(std::string("checkpoint: ") + e.what());
    }
}

namespace {

/// Writes tmp_dir/name holding, for each group (name, member of OptimShardView), the 1-D pieces of
/// every tensor inside `views` with their `offset` attributes; fsyncs it and returns it as a part.
/// Every value is checked finite before the file is created.
PartInfo write_pieces(const std::string& tmp_dir, const std::string& name, int k, const ParamLayout& layout,
                      const std::vector<OptimShardView>& views,
                      const std::vector<std::pair<const char*, const float* OptimShardView::*>>& groups) {
    const fs::path p = fs::path(tmp_dir) / name;
    const std::string file = p.string();
    // Checks first: segments disjoint, each tensor in at most one segment, every value finite.
    std::vector<OptimShardView> vs(views);
    std::sort(vs.begin(), vs.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < vs.size(); ++i)
        if (vs[i].begin < vs[i - 1].end) throw CheckpointError(file + ": optimizer segments overlap");
    struct Piece { const ParamTensor* t; const OptimShardView* s; size_t lo, hi; };
    std::vector<Piece> pieces;
    for (const auto& t : layout.tensors())
        for (const auto& s : vs) {
            const size_t lo = std::max(t.offset, s.begin), hi = std::min(t.offset + t.numel, s.end);
            if (lo >= hi) continue;
            if (!pieces.empty() && pieces.back().t == &t)
                throw CheckpointError(file + ": tensor " + t.name + " spans two optimizer segments of rank " +
                                      std::to_string(k) + " (one piece per tensor per shard file)");
            pieces.push_back({&t, &s, lo, hi});
        }
    for (const auto& [g, member] : groups)
        for (const auto& pc : pieces) {
            if (!(pc.s->*member)) throw CheckpointError(file + ": no /" + g + " values given for " + pc.t->name);
            require_finite(pc.s->*member + (pc.lo - pc.s->begin), pc.hi - pc.lo, g + ("/" + pc.t->name));
        }
    std::vector<RawDataset> ds;
    for (const auto& [g, member] : groups)
        for (const auto& pc : pieces)
            ds.push_back({g, pc.t->name, {hsize_t(pc.hi - pc.lo)}, pc.s->*member + (pc.lo - pc.s->begin), true,
                          int64_t(pc.lo - pc.t->offset)});
    return RawH5File(p, std::move(ds)).write_all();
}

/// Deletes the checkpoint directories `old` (under ckdir) without ever leaving a half-removed
/// step_<N>: each is first renamed to .del_step_<N> (a name resume never reads and start-up
/// recovery removes), checkpoints/ is fsynced, and only then are they deleted. Never throws:
/// a directory that cannot be renamed stays (the next checkpoint prunes it again), and without
/// the fsync nothing is deleted (recovery finishes the job at the next start).
void prune(const fs::path& ckdir, const std::vector<fs::path>& old) {
    std::vector<fs::path> doomed;
    for (const fs::path& p : old) {
        const fs::path del = ckdir / (".del_" + p.filename().string());
        std::error_code ec;
        if (fs::exists(fs::symlink_status(del, ec))) remove_quiet(del);
        fs_op();
        fs::rename(p, del, ec);
        if (!ec) doomed.push_back(del);
    }
    if (doomed.empty()) return;
    fs_op();
    if (!h5::try_fsync(ckdir.string()).empty()) return;
    for (const fs::path& d : doomed) remove_quiet(d);
}

}  // namespace

PartInfo write_optim_shard(const std::string& tmp_dir, int k, const ParamLayout& layout,
                           const std::vector<OptimShardView>& views) {
    return write_pieces(tmp_dir, "optim_" + std::to_string(k) + ".h5", k, layout, views,
                        {{"m", &OptimShardView::m}, {"v", &OptimShardView::v}});
}

std::vector<PartInfo> write_rank_files(const std::string& tmp_dir, int k, const ParamLayout& layout,
                                       const std::vector<OptimShardView>& views, bool whole_model) {
    auto write_model = [&] {
        return whole_model ? write_model_file(tmp_dir, layout, views) : write_model_slices(tmp_dir, layout, views);
    };
    // Two files, two threads (each writing with a hasher beside it): the SHA-256 of one file runs
    // while the other's pages are copied into the page cache and written back.
    PartInfo model;
    std::exception_ptr model_error;
    std::thread t([&] {
        try {
            model = write_model();
        } catch (...) {
            model_error = std::current_exception();
        }
    });
    PartInfo optim;
    try {
        optim = write_optim_shard(tmp_dir, k, layout, views);
    } catch (...) {
        t.join();
        throw;
    }
    t.join();
    if (model_error) std::rethrow_exception(model_error);
    return {optim, model};
}

std::string commit_checkpoint(const std::string& run_dir, const std::string& tmp_dir, const TrainState& st,
                              const ParamLayout& layout, const std::vector<PartInfo>& parts, int keep_last) {
    const fs::path ckdir = fs::path(run_dir) / "checkpoints", tmp(tmp_dir);
    const std::string name = "step_" + std::to_string(st.step);
    const fs::path final_dir = ckdir / name, old = ckdir / (".old_" + name);
    auto has = [&](auto pred) { return std::any_of(parts.begin(), parts.end(), pred); };
    const bool has_optim = has([](const PartInfo& p) { return p.name.rfind("optim_", 0) == 0; });
    const bool has_model = has([](const PartInfo& p) { return p.name == "model.h5"; });
    if (!has_optim || !has_model)
        throw CheckpointError("checkpoint: the parts reported for '" + tmp_dir +
                              "' lack an optim_<k>.h5 or the weights (did every rank write?)");
    // The reported files, not a directory listing: each must be there with its reported size
    // (model.h5 written by slices is checked by seal_model_slices instead).
    std::error_code ec;
    std::vector<PartInfo> files;
    std::vector<ByteSlice> slices;
    for (const PartInfo& p : parts) {
        if (!p.slices.empty()) {
            slices.insert(slices.end(), p.slices.begin(), p.slices.end());
            continue;
        }
        fs_op();
        const uintmax_t n = fs::file_size(tmp / p.name, ec);
        if (ec || n != p.bytes)
            throw CheckpointError("checkpoint: " + (tmp / p.name).string() + " was reported with " +
                                  std::to_string(p.bytes) + " bytes but " +
                                  (ec ? "is missing (" + ec.message() + ")" : "has " + std::to_string(n)));
        files.push_back(p);
    }
    if (!slices.empty()) files.push_back(seal_model_slices(tmp_dir, layout, std::move(slices)));
    // The listing pruning works from, checked before anything is published: a checkpoints/ that
    // cannot be listed fails the checkpoint here, with `latest` and every older checkpoint as they were.
    const std::vector<std::pair<int64_t, fs::path>> listed = step_dirs(ckdir);
    std::sort(files.begin(), files.end(), [](const PartInfo& a, const PartInfo& b) { return a.name < b.name; });
    write_text_synced(tmp / "state.toml", state_to_toml(st, files));
    sync(tmp);

    // Replace an existing step_<N> only now that the new one is complete: move it aside first.
    const bool had_old = fs::exists(final_dir, ec);
    if (had_old) {
        if (fs::exists(old, ec)) remove_quiet(old);
        rename_or_throw(final_dir, old);
    }
    rename_or_throw(tmp, final_dir);
    sync(ckdir);
    if (had_old) remove_quiet(old);

    write_text_synced(ckdir / "latest.tmp", name + "\n");
    rename_or_throw(ckdir / "latest.tmp", ckdir / "latest");
    sync(ckdir);

    if (keep_last > 0) {
        // Older checkpoints of this run, newest first; the first keep_last - 1 stay.
        std::vector<fs::path> mine;
        for (auto it = listed.rbegin(); it != listed.rend(); ++it) {
            if (it->first >= st.step) continue;
            try {
                if (read_state_file(it->second.string()).st.run_id == st.run_id) mine.push_back(it->second);
            } catch (const CheckpointError&) {
                // unreadable: not known to be ours, so never pruned
            }
        }
        if (mine.size() >= size_t(keep_last)) prune(ckdir, {mine.begin() + (keep_last - 1), mine.end()});
    }
    return final_dir.string();
}

void abort_checkpoint(const std::string& tmp_dir) noexcept {
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
}

std::string save_checkpoint(const std::string& run_dir, const TrainState& st, const ParamLayout& layout,
                            const float* params, const std::vector<OptimShardView>& shards, int keep_last) {
    const std::string tmp = begin_checkpoint(run_dir, st.step);
    try {
        std::vector<PartInfo> parts;
        if (shards.size() > 1) create_model_file(tmp, layout);
        for (size_t k = 0; k < shards.size(); ++k) {
            OptimShardView view = shards[k];
            view.w = params + view.begin;
            parts.push_back(write_optim_shard(tmp, int(k), layout, {view}));
            parts.push_back(shards.size() > 1 ? write_model_slices(tmp, layout, {view})
                                              : write_model_file(tmp, layout, {view}));
        }
        return commit_checkpoint(run_dir, tmp, st, layout, parts, keep_last);
    } catch (...) {
        abort_checkpoint(tmp);
        throw;
    }
}

std::vector<std::string> recover_checkpoint_leftovers(const std::string& run_dir) {
    const fs::path ckdir = fs::path(run_dir) / "checkpoints";
    std::vector<std::string> notes;
    std::error_code ec;
    for (const auto& p : list_dir(ckdir)) {
        const std::string n = p.filename().string();
        if (n == "latest.tmp" || n.rfind(".tmp_step_", 0) == 0) {
            remove_quiet(p);
            notes.push_back("checkpoint: removed " + p.string() + " (left by an interrupted write)");
        } else if (n.rfind(".del_", 0) == 0 && step_of(n.substr(5)) >= 0) {
            remove_quiet(p);
            notes.push_back("checkpoint: removed " + p.string() + " (left by interrupted pruning)");
        } else if (n.rfind(".old_", 0) == 0 && step_of(n.substr(5)) >= 0) {
            const fs::path target = ckdir / n.substr(5);
            std::string why;
            if (fs::exists(target, ec)) {
                why = "its replacement " + target.filename().string() + " is complete";
            } else if ((why = checkpoint_problem(p.string())).empty()) {
                rename_or_throw(p, target);
                sync(ckdir);
                notes.push_back("checkpoint: restored " + target.string() + " from " + n + " (left by an interrupted replace)");
                continue;
            }
            remove_quiet(p);
            notes.push_back("checkpoint: removed " + p.string() + " (" + why + ")");
        }
    }
    return notes;
}

}  // namespace llmtrain
