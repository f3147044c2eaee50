// app/checkpoint/read.cpp — checkpoint verification and reading (see checkpoint.hpp); resume lookup is
// app/checkpoint/lookup.cpp.
// HDF5 through data/h5.hpp; state.toml through TOML++.
#include <hdf5.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <toml++/toml.h>

#include "app/checkpoint/checkpoint.hpp"
#include "app/checkpoint/format.hpp"
#include "data/h5.hpp"
#include "model/arch.hpp"

namespace llmtrain {

namespace ckpt {

namespace {

/// [slices].<name> of a format-4 state.toml: [lo, hi, "sha256"] triples that tile [0, bytes).
/// Errors: CheckpointError naming the file and the entry.
std::vector<ByteSlice> read_slices(const toml::table& t, const std::string& name, uint64_t bytes,
                                   const std::string& file) {
    const toml::array* a = t["slices"][name].as_array();
    const std::string key = "slices." + name;
    if (!a || a->empty()) throw CheckpointError(file + ": " + key + ": missing or empty (files." + name + " = \"" +
                                                kSlicedSha + "\")");
    std::vector<ByteSlice> out;
    uint64_t at = 0;
    for (size_t i = 0; i < a->size(); ++i) {
        const toml::array* e = (*a)[i].as_array();
        auto lo = e && e->size() == 3 ? (*e)[0].value_exact<int64_t>() : std::nullopt;
        auto hi = e && e->size() == 3 ? (*e)[1].value_exact<int64_t>() : std::nullopt;
        auto sha = e && e->size() == 3 ? (*e)[2].value_exact<std::string>() : std::nullopt;
        if (!lo || !hi || !sha || uint64_t(*lo) != at || *hi <= *lo)
            throw CheckpointError(file + ": " + key + "[" + std::to_string(i) + "]: expected [lo, hi, \"sha256\"] with lo = " +
                                  std::to_string(at) + " (the previous slice's end) and hi > lo");
        out.push_back({uint64_t(*lo), uint64_t(*hi), *sha});
        at = uint64_t(*hi);
    }
    if (at != bytes)
        throw CheckpointError(file + ": " + key + ": the slices end at byte " + std::to_string(at) + ", bytes." + name +
                              " = " + std::to_string(bytes));
    return out;
}

}  // namespace

StateFile read_state_file(const std::string& dir) {
    const fs::path path = fs::path(dir) / "state.toml";
    const std::string file = path.string();
    std::string text;
    {
        std::ifstream f(path, std::ios::binary);
        if (!f) throw CheckpointError("checkpoint '" + dir + "': missing state.toml (incomplete)");
        std::stringstream ss;
        ss << f.rdbuf();
        text = ss.str();
    }
    // Format 2's self-checksum first, so damage is reported as such rather than as a syntax error.
    const size_t sealed = text.rfind(std::string("\n") + kIntegrityHeader);
    if (sealed != std::string::npos) {
        const std::string key = "state_sha256 = \"";
        const size_t at = text.find(key, sealed);
        if (at == std::string::npos || text.compare(at + key.size(), 64, sha256_hex(text.substr(0, sealed + 1))) != 0)
            throw CheckpointError(file + ": state_sha256 does not match the file's contents (damaged)");
    }
    toml::table t;
    try {
        t = toml::parse(text, file);
    } catch (const toml::parse_error& e) {
        std::ostringstream os;
        os << file << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
        throw CheckpointError(os.str());
    }
    auto need_int = [&](const char* key) -> int64_t {
        auto v = t.at_path(key).value_exact<int64_t>();
        if (!v) throw CheckpointError(file + ": " + key + ": missing or not an integer");
        return *v;
    };
    auto need_str = [&](const char* key) -> std::string {
        auto v = t.at_path(key).value_exact<std::string>();
        if (!v) throw CheckpointError(file + ": " + key + ": missing or not a string");
        return *v;
    };
    StateFile sf;
    sf.version = int(need_int("format_version"));
    if (sf.version < 1 || sf.version > kFormatVersion)
        throw CheckpointError(file + ": format_version: expected 1 to " + std::to_string(kFormatVersion) + ", got " +
                              std::to_string(sf.version));
    if (sf.version >= 2) {
        if (sealed == std::string::npos) throw CheckpointError(file + ": [integrity] state_sha256: missing");
        sf.st.run_id = need_str("run_id");
        const toml::table* files = t["files"].as_table();
        if (!files || files->empty()) throw CheckpointError(file + ": files: missing or empty");
        for (const auto& [k, v] : *files) {
            auto s = v.value_exact<std::string>();
            if (!s) throw CheckpointError(file + ": files." + std::string(k.str()) + ": not a string");
            PartInfo p{std::string(k.str()), 0, *s, {}};
            if (sf.version >= 3) {  // every listed file has its size
                auto b = t["bytes"][k.str()].value_exact<int64_t>();
                if (!b || *b <= 0) throw CheckpointError(file + ": bytes." + p.name + ": missing or not a positive integer");
                p.bytes = uint64_t(*b);
            }
            if (p.sha256 == kSlicedSha) p.slices = read_slices(t, p.name, p.bytes, file);
            sf.files.push_back(std::move(p));
        }
    }
    TrainState& st = sf.st;
    st.step = need_int("step");
    st.tokens_seen = uint64_t(need_int("tokens_seen"));
    st.adam_t = int(need_int("adam_t"));
    if (t["restarts"]) {  // absent before restarts were counted: 0
        st.restarts = need_int("restarts");
        if (st.restarts < 0) throw CheckpointError(file + ": restarts: expected >= 0, got " + std::to_string(st.restarts));
    }
    if (const toml::array* rows = t.at_path("moe.bias").as_array()) {  // model.moe.bias_update_rate > 0
        for (size_t r = 0; r < rows->size(); ++r) {
            const toml::array* row = rows->get(r)->as_array();
            if (!row || row->empty() || (r > 0 && int(row->size()) != st.moe_experts))
                throw CheckpointError(file + ": moe.bias[" + std::to_string(r) + "]: expected an array of n_experts numbers");
            st.moe_experts = int(row->size());
            for (size_t e = 0; e < row->size(); ++e) {
                auto v = row->get(e)->value<double>();
                if (!v) throw CheckpointError(file + ": moe.bias[" + std::to_string(r) + "]: not a number");
                st.moe_bias.push_back(float(*v));
            }
        }
    }
    if (t.at_path("loader.epoch")) {  // written before stream positions: this rank's micro-batch index
        st.legacy_loader = {uint64_t(need_int("loader.epoch")), uint64_t(need_int("loader.batch"))};
    } else {
        const int64_t sample = need_int("loader.sample");
        if (sample < 0) throw CheckpointError(file + ": loader.sample: expected >= 0, got " + std::to_string(sample));
        st.loader = LoaderState{uint64_t(sample), uint64_t(need_int("loader.seed")), {}};  // the seed as its 64 bits
        if (const toml::array* sources = t.at_path("loader.sources").as_array())  // a mixture's (absent: one path)
            for (size_t i = 0; i < sources->size(); ++i) {
                const std::string at = file + ": loader.sources[" + std::to_string(i) + "]";
                const toml::node& n = *sources->get(i);
                auto name = n.at_path("name").value_exact<std::string>();
                auto weight = n.at_path("weight").value<double>();
                auto position = n.at_path("position").value_exact<int64_t>();
                auto drawn = n.at_path("drawn").value_exact<int64_t>();
                if (!name || !weight || !position || *position < 0 || !drawn || *drawn < 0)
                    throw CheckpointError(at + ": expected name, weight, position >= 0 and drawn >= 0");
                st.loader.sources.push_back(SourceState{*name, *weight, uint64_t(*position), uint64_t(*drawn)});
            }
    }
    st.sampler_rng = need_str("sampler_rng");
    st.model_config_hash = need_str("model.config_hash");
    st.model.n_layer = int(need_int("model.n_layer"));
    st.model.n_head = int(need_int("model.n_head"));
    st.model.n_embd = int(need_int("model.n_embd"));
    st.model.seq_len = int(need_int("model.seq_len"));
    st.model.vocab_size = int(need_int("model.vocab_size"));
    if (t.at_path("model.arch")) {  // a non-GPT-2 architecture's resolved keys (state_to_toml)
        auto need_num = [&](const char* key) -> double {
            auto v = t.at_path(key).value<double>();  // an integer-valued float may be written as one
            if (!v) throw CheckpointError(file + ": " + key + ": missing or not a number");
            return *v;
        };
        auto tied = t.at_path("model.tie_embeddings").value_exact<bool>();
        if (!tied) throw CheckpointError(file + ": model.tie_embeddings: missing or not a boolean");
        try {
            st.model.arch = parse_arch(need_str("model.arch"));
        } catch (const std::invalid_argument& e) {
            throw CheckpointError(file + ": " + e.what());
        }
        st.model.n_kv_head = int(need_int("model.n_kv_head"));
        st.model.intermediate_size = int(need_int("model.intermediate_size"));
        st.model.tie_embeddings = *tied;
        st.model.rope_theta = float(need_num("model.rope_theta"));
        st.model.norm_eps = float(need_num("model.norm_eps"));
    }
    if (const toml::table* id = t["model_identity"].as_table()) {  // format 4
        for (const auto& [k, v] : *id) {
            auto s = v.value_exact<std::string>();
            if (!s) throw CheckpointError(file + ": model_identity." + std::string(k.str()) + ": not a string");
            st.model_identity.emplace_back(std::string(k.str()), *s);
        }
    }
    st.dp = int(need_int("world.dp"));
    st.world_size = int(need_int("world.world_size"));
    st.backend = need_str("backend.name");
    st.precision = need_str("backend.precision");
    return sf;
}

}  // namespace ckpt

using namespace ckpt;

std::string checkpoint_problem(const std::string& dir, int share, int shares) {
    try {
        const StateFile sf = read_state_file(dir);
        if (sf.version < 2) return "";  // format 1 carries no checksums
        size_t item = 0;  // the SHA-256 checks in order (a whole file, or one slice): this share's every shares-th
        auto mine = [&] { return shares > 0 && int(item++ % size_t(shares)) == share; };
        for (const PartInfo& f : sf.files) {
            const fs::path p = fs::path(dir) / f.name;
            std::error_code ec;
            if (!fs::is_regular_file(p, ec)) return f.name + " is missing";
            if (const uint64_t n = fs::file_size(p, ec); f.bytes > 0 && n != f.bytes)
                return f.name + " has " + std::to_string(n) + " bytes, state.toml says " + std::to_string(f.bytes) +
                       " (truncated or damaged)";
            if (f.slices.empty()) {
                if (mine() && sha256_file_hex(p.string()) != f.sha256) return f.name + ": SHA-256 differs from state.toml (damaged)";
                continue;
            }
            for (const ByteSlice& b : f.slices)
                if (mine() && sha256_file_range_hex(p.string(), b.lo, b.hi) != b.sha256)
                    return f.name + ": SHA-256 of bytes [" + std::to_string(b.lo) + ", " + std::to_string(b.hi) +
                           ") differs from state.toml (damaged)";
        }
        // An extra file means a writer this state.toml does not know of: refused rather than ignored
        // (and a directory that cannot be listed is not known to have none).
        for (const fs::path& e : list_dir(dir)) {
            const std::string n = e.filename().string();
            const bool listed = std::any_of(sf.files.begin(), sf.files.end(), [&](const auto& f) { return f.name == n; });
            if (n != "state.toml" && !listed) return n + " is not listed in state.toml";
        }
        return "";
    } catch (const std::exception& e) {  // CheckpointError from the state file, DataError from hashing
        return e.what();
    }
}

TrainState read_train_state(const std::string& dir) { return read_state_file(dir).st; }

void read_params(const std::string& dir, const ParamLayout& layout, float* params) {
    // Every element: one range over the whole flat buffer (app/checkpoint/read_shard.cpp).
    read_params_ranges(dir, layout, {{0, layout.total_numel()}}, params);
}

void read_optim(const std::string& dir, const ParamLayout& layout, size_t begin, size_t end, float* m,
                float* v) {
    // Of each piece only the elements in [begin, end) are read (app/checkpoint/read_shard.cpp).
    read_optim_ranges(dir, layout, {{begin, end - begin}}, m, v);
}

}  // namespace llmtrain
