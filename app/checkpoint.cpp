// app/checkpoint.cpp — checkpoint write protocol, lookup and reading (see checkpoint.hpp).
// HDF5 through the C API, one small RAII handle; state.toml through TOML++.
#include "app/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

namespace fs = std::filesystem;

namespace llmtrain {

namespace {

constexpr int kFormatVersion = 1;

/// Owns an HDF5 identifier (file, group, dataset, dataspace, attribute); closes it on destruction.
struct H5Id {
    hid_t id = H5I_INVALID_HID;
    explicit H5Id(hid_t i) : id(i) {}
    H5Id(const H5Id&) = delete;
    H5Id& operator=(const H5Id&) = delete;
    ~H5Id() {
        if (id >= 0) H5Idec_ref(id);
    }
};

/// Throws CheckpointError("<what>") when an HDF5 id or status is negative.
hid_t h5_check(hid_t v, const std::string& what) {
    if (v < 0) throw CheckpointError(what);
    return v;
}

/// Silences HDF5's printed error stack on this thread while alive (errors become exceptions).
struct H5Quiet {
    H5E_auto2_t fn = nullptr;
    void* data = nullptr;
    H5Quiet() {
        H5Eget_auto2(H5E_DEFAULT, &fn, &data);
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    }
    ~H5Quiet() { H5Eset_auto2(H5E_DEFAULT, fn, data); }
};

std::string os_error(const std::string& what, const std::string& path) {
    return what + " '" + path + "': " + std::strerror(errno);
}

/// fsync a file or directory by path so that its contents (or entries) reach the disk.
void fsync_path(const fs::path& p) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw CheckpointError(os_error("checkpoint: cannot open for fsync", p));
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) throw CheckpointError(os_error("checkpoint: fsync failed on", p));
}

/// Writes text to path (truncating) and fsyncs it.
void write_text_synced(const fs::path& p, const std::string& text) {
    {
        std::ofstream f(p, std::ios::binary | std::ios::trunc);
        f << text;
        f.flush();
        if (!f) throw CheckpointError(os_error("checkpoint: cannot write", p));
    }
    fsync_path(p);
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
    if (std::rename(from.c_str(), to.c_str()) != 0)
        throw CheckpointError(os_error("checkpoint: cannot rename '" + from.string() + "' to", to));
}

/// "step_<N>" -> N, or -1 for any other name.
int64_t step_of(const std::string& name) {
    if (name.rfind("step_", 0) != 0 || name.size() == 5) return -1;
    for (size_t i = 5; i < name.size(); ++i)
        if (name[i] < '0' || name[i] > '9') return -1;
    return std::stoll(name.substr(5));
}

/// Complete checkpoints under ckdir as (step, path), ascending by step.
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const fs::path& ckdir) {
    std::vector<std::pair<int64_t, fs::path>> out;
    std::error_code ec;
    if (!fs::is_directory(ckdir, ec)) return out;
    for (const auto& e : fs::directory_iterator(ckdir, ec)) {
        int64_t s = step_of(e.path().filename().string());
        if (s >= 0 && e.is_directory(ec) && fs::is_regular_file(e.path() / "state.toml", ec))
            out.emplace_back(s, e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

/// Creates an fp32 dataset `name` under loc with dims and writes data (host fp32).
void write_f32(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const float* data,
               const std::string& file) {
    H5Id space(h5_check(H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                        file + ": cannot create dataspace for " + name));
    H5Id ds(h5_check(H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space.id, H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT),
                     file + ": cannot create dataset " + name));
    h5_check(H5Dwrite(ds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
             file + ": cannot write dataset " + name);
}

/// model.h5: every tensor by name with its global shape.
void write_model(const fs::path& p, const ParamLayout& layout, const float* params) {
    H5Id f(h5_check(H5Fcreate(p.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), "checkpoint: cannot create " + p.string()));
    for (const auto& t : layout.tensors()) {
        std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
        write_f32(f.id, t.name, dims, params + t.offset, p.string());
    }
    h5_check(H5Fflush(f.id, H5F_SCOPE_GLOBAL), "checkpoint: cannot flush " + p.string());
}

/// optim_<k>.h5: the pieces of every tensor inside [s.begin, s.end), with their offsets in the tensor.
void write_optim(const fs::path& p, const ParamLayout& layout, const OptimShardView& s) {
    const std::string file = p.string();
    H5Id f(h5_check(H5Fcreate(p.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), "checkpoint: cannot create " + file));
    H5Id gm(h5_check(H5Gcreate2(f.id, "m", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), file + ": cannot create group m"));
    H5Id gv(h5_check(H5Gcreate2(f.id, "v", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), file + ": cannot create group v"));
    for (const auto& t : layout.tensors()) {
        size_t lo = std::max(t.offset, s.begin), hi = std::min(t.offset + t.numel, s.end);
        if (lo >= hi) continue;
        std::vector<hsize_t> dims = {hsize_t(hi - lo)};
        const int64_t off = int64_t(lo - t.offset);
        for (auto [g, src] : {std::pair{gm.id, s.m}, std::pair{gv.id, s.v}}) {
            write_f32(g, t.name, dims, src + (lo - s.begin), file);
            H5Id ds(h5_check(H5Dopen2(g, t.name.c_str(), H5P_DEFAULT), file + ": cannot reopen " + t.name));
            H5Id sp(H5Screate(H5S_SCALAR));
            H5Id at(h5_check(H5Acreate2(ds.id, "offset", H5T_STD_I64LE, sp.id, H5P_DEFAULT, H5P_DEFAULT),
                             file + ": cannot create attribute offset of " + t.name));
            h5_check(H5Awrite(at.id, H5T_NATIVE_INT64, &off), file + ": cannot write offset of " + t.name);
        }
    }
    h5_check(H5Fflush(f.id, H5F_SCOPE_GLOBAL), "checkpoint: cannot flush " + file);
}

std::string state_to_toml(const TrainState& st) {
    toml::table t{
        {"format_version", kFormatVersion},
        {"step", st.step},
        {"tokens_seen", int64_t(st.tokens_seen)},
        {"adam_t", st.adam_t},
        {"loader", toml::table{{"epoch", int64_t(st.loader.epoch)}, {"batch", int64_t(st.loader.batch)}}},
        {"sampler_rng", st.sampler_rng},
        {"model", toml::table{{"config_hash", st.model_config_hash},
                              {"n_layer", st.model.n_layer},
                              {"n_head", st.model.n_head},
                              {"n_embd", st.model.n_embd},
                              {"seq_len", st.model.seq_len},
                              {"vocab_size", st.model.vocab_size}}},
        {"world", toml::table{{"dp", st.dp}, {"world_size", st.world_size}}},
        {"backend", toml::table{{"name", st.backend}, {"precision", st.precision}}},
    };
    std::ostringstream os;
    os << "# llmtrain checkpoint state (written last: its presence marks a complete checkpoint)\n" << t << "\n";
    return os.str();
}

/// Removes a directory tree; errors are reported, not thrown (used for pruning and clean-up).
void remove_tree_quiet(const fs::path& p) {
    std::error_code ec;
    fs::remove_all(p, ec);
}

/// The checkpoint file dir/name must exist; returns its path.
std::string require_file(const std::string& dir, const std::string& name) {
    fs::path p = fs::path(dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) throw CheckpointError("checkpoint '" + dir + "': missing " + name);
    return p.string();
}

std::string shape_str(const std::vector<hsize_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
}

/// Reads 1-D or N-D fp32 dataset `name` under loc, checking its dims; returns false if absent.
bool read_f32(hid_t loc, const std::string& name, const std::vector<hsize_t>* want, std::vector<hsize_t>* got,
              float* out, const std::string& file) {
    if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) return false;
    H5Id ds(h5_check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), file + ": cannot open dataset " + name));
    H5Id sp(h5_check(H5Dget_space(ds.id), file + ": cannot read the shape of " + name));
    int rank = H5Sget_simple_extent_ndims(sp.id);
    if (rank < 0) throw CheckpointError(file + ": cannot read the shape of " + name);
    std::vector<hsize_t> dims(rank);
    H5Sget_simple_extent_dims(sp.id, dims.data(), nullptr);
    if (want && dims != *want)
        throw CheckpointError(file + ": tensor " + name + " has shape " + shape_str(dims) +
                              " in the checkpoint but " + shape_str(*want) + " in the model");
    if (got) *got = dims;
    if (out)
        h5_check(H5Dread(ds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
                 file + ": cannot read dataset " + name);
    return true;
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const TrainState& st, const ParamLayout& layout,
                            const float* params, const std::vector<OptimShardView>& shards, int keep_last) {
    H5Quiet quiet;
    const fs::path ckdir = fs::path(run_dir) / "checkpoints";
    const std::string name = "step_" + std::to_string(st.step);
    const fs::path tmp = ckdir / (".tmp_" + name), final_dir = ckdir / name;
    std::error_code ec;
    fs::create_directories(ckdir, ec);
    if (ec) throw CheckpointError("checkpoint: cannot create '" + ckdir.string() + "': " + ec.message());
    remove_tree_quiet(tmp);  // a leftover of an earlier crashed write of this same step
    if (!fs::create_directory(tmp, ec))
        throw CheckpointError("checkpoint: cannot create '" + tmp.string() + "': " + ec.message());

    write_model(tmp / "model.h5", layout, params);
    fsync_path(tmp / "model.h5");
    for (size_t k = 0; k < shards.size(); ++k) {
        fs::path p = tmp / ("optim_" + std::to_string(k) + ".h5");
        write_optim(p, layout, shards[k]);
        fsync_path(p);
    }
    write_text_synced(tmp / "state.toml", state_to_toml(st));
    fsync_path(tmp);

    // Replace an existing step_<N> only now that the new one is complete: move it aside first.
    const fs::path old = ckdir / (".old_" + name);
    const bool had_old = fs::exists(final_dir, ec);
    if (had_old) {
        remove_tree_quiet(old);
        rename_or_throw(final_dir, old);
    }
    rename_or_throw(tmp, final_dir);
    fsync_path(ckdir);
    if (had_old) remove_tree_quiet(old);

    write_text_synced(ckdir / "latest.tmp", name + "\n");
    rename_or_throw(ckdir / "latest.tmp", ckdir / "latest");
    fsync_path(ckdir);

    if (keep_last > 0) {
        auto all = complete_checkpoints(ckdir);
        for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i)
            if (all[i].second != final_dir) remove_tree_quiet(all[i].second);
    }
    return final_dir.string();
}

std::string find_latest_checkpoint(const std::string& run_dir) {
    auto all = complete_checkpoints(fs::path(run_dir) / "checkpoints");
    return all.empty() ? std::string() : all.back().second.string();
}

std::string resolve_resume(const std::string& resume, const std::string& run_dir) {
    if (resume == "none") return "";
    if (resume == "auto") return find_latest_checkpoint(run_dir);
    std::error_code ec;
    if (!fs::is_directory(resume, ec))
        throw CheckpointError("checkpoint.resume: '" + resume + "' is not a directory");
    if (!fs::is_regular_file(fs::path(resume) / "state.toml", ec))
        throw CheckpointError("checkpoint.resume: '" + resume +
                              "' is not a complete checkpoint (no state.toml: half-written?)");
    return resume;
}

TrainState read_train_state(const std::string& dir) {
    const std::string path = require_file(dir, "state.toml");
    toml::table t;
    try {
        t = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        std::ostringstream os;
        os << path << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
        throw CheckpointError(os.str());
    }
    auto need_int = [&](const char* key) -> int64_t {
        auto v = t.at_path(key).value_exact<int64_t>();
        if (!v) throw CheckpointError(path + ": " + key + ": missing or not an integer");
        return *v;
    };
    auto need_str = [&](const char* key) -> std::string {
        auto v = t.at_path(key).value_exact<std::string>();
        if (!v) throw CheckpointError(path + ": " + key + ": missing or not a string");
        return *v;
    };
    if (need_int("format_version") != kFormatVersion)
        throw CheckpointError(path + ": format_version: expected " + std::to_string(kFormatVersion));
    TrainState st;
    st.step = need_int("step");
    st.tokens_seen = uint64_t(need_int("tokens_seen"));
    st.adam_t = int(need_int("adam_t"));
    st.loader.epoch = uint64_t(need_int("loader.epoch"));
    st.loader.batch = uint64_t(need_int("loader.batch"));
    st.sampler_rng = need_str("sampler_rng");
    st.model_config_hash = need_str("model.config_hash");
    st.model.n_layer = int(need_int("model.n_layer"));
    st.model.n_head = int(need_int("model.n_head"));
    st.model.n_embd = int(need_int("model.n_embd"));
    st.model.seq_len = int(need_int("model.seq_len"));
    st.model.vocab_size = int(need_int("model.vocab_size"));
    st.dp = int(need_int("world.dp"));
    st.world_size = int(need_int("world.world_size"));
    st.backend = need_str("backend.name");
    st.precision = need_str("backend.precision");
    return st;
}

void read_params(const std::string& dir, const ParamLayout& layout, float* params) {
    H5Quiet quiet;
    const std::string file = require_file(dir, "model.h5");
    std::fill(params, params + layout.total_numel(), 0.0f);
    H5Id f(h5_check(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "checkpoint: cannot open " + file));
    for (const auto& t : layout.tensors()) {
        std::vector<hsize_t> want(t.shape.begin(), t.shape.end());
        if (!read_f32(f.id, t.name, &want, nullptr, params + t.offset, file))
            throw CheckpointError(file + ": tensor " + t.name + " is missing");
    }
}

void read_optim(const std::string& dir, const ParamLayout& layout, size_t begin, size_t end, float* m,
                float* v) {
    H5Quiet quiet;
    std::fill(m, m + (end - begin), 0.0f);
    std::fill(v, v + (end - begin), 0.0f);
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (n.rfind("optim_", 0) == 0 && e.path().extension() == ".h5") files.push_back(e.path());
    }
    if (files.empty()) throw CheckpointError("checkpoint '" + dir + "': no optim_<k>.h5 shard");
    size_t covered = 0;  // parameter elements of [begin, end) filled so far
    std::vector<float> piece;
    for (const auto& p : files) {
        const std::string file = p.string();
        H5Id f(h5_check(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "checkpoint: cannot open " + file));
        for (const auto& t : layout.tensors()) {
            for (auto [grp, dst] : {std::pair{"m", m}, std::pair{"v", v}}) {
                const std::string name = std::string(grp) + "/" + t.name;
                if (H5Lexists(f.id, grp, H5P_DEFAULT) <= 0) throw CheckpointError(file + ": group " + grp + " is missing");
                std::vector<hsize_t> dims;
                if (!read_f32(f.id, name, nullptr, &dims, nullptr, file)) continue;
                if (dims.size() != 1) throw CheckpointError(file + ": " + name + " is not 1-D");
                int64_t off = -1;
                {
                    H5Id ds(h5_check(H5Dopen2(f.id, name.c_str(), H5P_DEFAULT), file + ": cannot open " + name));
                    H5Id at(h5_check(H5Aopen(ds.id, "offset", H5P_DEFAULT), file + ": " + name + ": no offset attribute"));
                    h5_check(H5Aread(at.id, H5T_NATIVE_INT64, &off), file + ": " + name + ": cannot read offset");
                }
                if (off < 0 || size_t(off) + dims[0] > t.numel)
                    throw CheckpointError(file + ": " + name + ": piece [" + std::to_string(off) + ", +" +
                                          std::to_string(dims[0]) + ") outside the tensor's " +
                                          std::to_string(t.numel) + " elements");
                // Flat range of the piece, intersected with ours.
                const size_t plo = t.offset + size_t(off), phi = plo + dims[0];
                const size_t lo = std::max(plo, begin), hi = std::min(phi, end);
                if (lo >= hi) continue;
                piece.resize(dims[0]);
                read_f32(f.id, name, nullptr, nullptr, piece.data(), file);
                std::copy(piece.begin() + (lo - plo), piece.begin() + (hi - plo), dst + (lo - begin));
                if (dst == m) covered += hi - lo;
            }
        }
    }
    size_t want = 0;
    for (const auto& t : layout.tensors()) {
        size_t lo = std::max(t.offset, begin), hi = std::min(t.offset + t.numel, end);
        if (lo < hi) want += hi - lo;
    }
    if (covered != want)
        throw CheckpointError("checkpoint '" + dir + "': optimizer shards cover " + std::to_string(covered) + " of " +
                              std::to_string(want) + " parameter elements of this rank's range");
}

}  // namespace llmtrain
