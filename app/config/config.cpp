// app/config/config.cpp — loading, checking, overriding and printing the llmtrain Config (TOML++ 3.3).
//
// One table, fields(), lists every key: its section, its member of Config and its range check.
// TOML++ has no strict mode, so loading walks the document and looks every key up in that table:
// an unknown section or key is an error (with the closest known key as a hint). Values are read
// with value_exact (no silent conversion: "3e-4" or true for a number is an error; an integer for a
// float key is accepted as that float); a list key takes a TOML array, checked element by element
// (errors name the position: "pipeline.layers_per_stage[2]: ..."). Each key's origin
// ("file:line:col" or "--set ...") is remembered so that checks across keys point at the key the
// user wrote.
// TOML++ is heavy to compile: it is included here only.
#include "app/config/config.hpp"
#include "app/config/config_checks.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "app/config/key_checks.hpp"
#include "app/config/listen.hpp"
#include "app/config/toml_text.hpp"
#include "model/arch.hpp"
#include "parallel/schedule.hpp"

namespace llmtrain {
namespace {

// ---------------------------------------------------------------------------------------------
// Describing a TOML value in messages (printing values: app/config/toml_text.hpp)
// ---------------------------------------------------------------------------------------------

/// What a TOML node holds, for "got ..." in messages: `the string "3e-4"`, `the boolean true`.
std::string describe(const toml::node& n) {
    std::ostringstream os;
    if (auto s = n.value_exact<std::string>()) return "the string " + quote(*s);
    if (auto i = n.value_exact<int64_t>()) return "the integer " + std::to_string(*i);
    if (auto d = n.value_exact<double>()) {
        os << *d;
        return "the float " + os.str();
    }
    if (auto b = n.value_exact<bool>()) return std::string("the boolean ") + (*b ? "true" : "false");
    if (n.is_table()) return "a table";
    if (n.is_array()) return "an array";
    return "a date/time";
}

// ---------------------------------------------------------------------------------------------
// Reading one value: the type first (value_exact), then the key's range
// ---------------------------------------------------------------------------------------------

/// Each read_value returns "" or the complete complaint "expected ..., got ...".
std::string read_value(const toml::node& n, int64_t& out) {
    auto v = n.value_exact<int64_t>();
    if (!v) return "expected an integer, got " + describe(n);
    out = *v;
    return "";
}

std::string read_value(const toml::node& n, int& out) {
    int64_t v;
    if (auto err = read_value(n, v); !err.empty()) return err;
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
        return "expected an integer in [-2147483648, 2147483647], got " + std::to_string(v);
    out = static_cast<int>(v);
    return "";
}

std::string read_value(const toml::node& n, uint64_t& out) {
    int64_t v;
    if (auto err = read_value(n, v); !err.empty()) return err;
    if (v < 0) return "expected an integer >= 0, got " + std::to_string(v);
    out = static_cast<uint64_t>(v);
    return "";
}

/// Floats: a TOML float or an integer (lr = 1 means 1.0); inf and nan are refused.
std::string read_value(const toml::node& n, double& out) {
    if (auto d = n.value_exact<double>()) {
        out = *d;
    } else if (auto i = n.value_exact<int64_t>()) {
        out = static_cast<double>(*i);
    } else {
        return "expected a number, got " + describe(n);
    }
    if (!std::isfinite(out)) return "expected a finite number, got " + describe(n);
    return "";
}

std::string read_value(const toml::node& n, float& out) {
    double d;
    if (auto err = read_value(n, d); !err.empty()) return err;
    const auto f = static_cast<float>(d);
    if (std::fabs(d) > std::numeric_limits<float>::max() || (f == 0.0f && d != 0.0))
        return "expected a number that fits a 32-bit float, got " + describe(n);
    out = f;
    return "";
}

std::string read_value(const toml::node& n, bool& out) {
    auto v = n.value_exact<bool>();
    if (!v) return "expected true or false, got " + describe(n);
    out = *v;
    return "";
}

std::string read_value(const toml::node& n, std::string& out) {
    auto v = n.value_exact<std::string>();
    if (!v) return "expected a string (in quotes), got " + describe(n);
    out = *v;
    return "";
}

using namespace key_checks;  // the range checks of the table below (app/config/key_checks.hpp)

// ---------------------------------------------------------------------------------------------
// The table of keys
// ---------------------------------------------------------------------------------------------

/// One config key: reads a TOML value into its member (type and range checked) and prints it back.
struct Field {
    std::string section, key;
    /// Reads `n` into cfg; returns "" or the complaint ("expected ..., got ..."). A list's complaint
    /// about one element starts with its index: "[2]: expected ..." (see complaint()).
    std::function<std::string(const toml::node& n, Config& cfg)> read;
    /// The member's value in TOML syntax.
    std::function<std::string(const Config& cfg)> write;
    /// When set and true, to_toml leaves the key out (data.train beside data.sources).
    std::function<bool(const Config& cfg)> omit;
    std::string name() const { return section + "." + key; }
};

template <class Sec, class T>
Field field(const char* section, const char* key, Sec Config::*sec, T Sec::*member, Check<T> check = {}) {
    Field f;
    f.section = section;
    f.key = key;
    f.read = [sec, member, check](const toml::node& n, Config& cfg) -> std::string {
        T v{};
        if (auto err = read_value(n, v); !err.empty()) return err;
        if (check)
            if (auto want = check(v); !want.empty()) return "expected " + want + ", got " + value_text(v);
        cfg.*sec.*member = v;
        return "";
    };
    f.write = [sec, member](const Config& cfg) { return value_text(cfg.*sec.*member); };
    return f;
}

/// A list key (TOML array) whose every element is read like a scalar key's value and range-checked.
template <class Sec, class T>
Field list_field(const char* section, const char* key, Sec Config::*sec, std::vector<T> Sec::*member, Check<T> check) {
    Field f;
    f.section = section;
    f.key = key;
    f.read = [sec, member, check](const toml::node& n, Config& cfg) -> std::string {
        const toml::array* arr = n.as_array();
        if (!arr) {
            T probe{};
            const bool scalar_fits = read_value(n, probe).empty();
            const std::string hint = scalar_fits ? " (in brackets, e.g. [" + value_text(probe) + "])" : "";
            return "expected an array" + hint + ", got " + describe(n);
        }
        std::vector<T> list(arr->size());
        for (size_t i = 0; i < arr->size(); ++i) {
            // (std::string first: "[" + std::to_string(i) trips a false GCC 12 -Wrestrict warning)
            const std::string at = std::string(1, '[') + std::to_string(i) + "]: ";
            if (auto err = read_value(*arr->get(i), list[i]); !err.empty()) return at + err;
            if (auto want = check(list[i]); !want.empty())
                return at + "expected " + want + ", got " + value_text(list[i]);
        }
        cfg.*sec.*member = std::move(list);
        return "";
    };
    f.write = [sec, member](const Config& cfg) { return value_text(cfg.*sec.*member); };
    return f;
}

/// The table of one [[data.sources]] entry into src; "" or "[i].<key>: <complaint>".
std::string read_source(const toml::node& n, size_t i, DataSource& src) {
    const std::string at = std::string(1, '[') + std::to_string(i) + "]";
    const toml::table* t = n.as_table();
    if (!t) return at + ": expected a table (name, path, weight, val), got " + describe(n);
    for (const auto& [key, v] : *t) {
        const std::string k(key.str());
        std::string err;
        if (k == "name" || k == "path" || k == "val") {
            std::string& dst = k == "name" ? src.name : k == "path" ? src.path : src.val;
            err = read_value(v, dst);
            if (err.empty() && k != "val" && dst.empty()) err = "expected a non-empty string";
        } else if (k == "weight") {
            err = read_value(v, src.weight);
            if (err.empty() && !(src.weight > 0)) err = "expected a number > 0, got " + value_text(src.weight);
        } else {
            err = "unknown key (a source has name, path, weight, val)";
        }
        if (!err.empty()) return at + "." + k + ": " + err;
    }
    if (src.name.empty()) return at + ": name: missing";
    if (src.path.empty()) return at + ": path: missing";
    return "";
}

/// data.sources: an array of tables ([[data.sources]] or inline), names unique; printed inline.
Field sources_field() {
    Field f;
    f.section = "data";
    f.key = "sources";
    f.read = [](const toml::node& n, Config& cfg) -> std::string {
        const toml::array* arr = n.as_array();
        if (!arr) return "expected an array of tables ([[data.sources]]), got " + describe(n);
        std::vector<DataSource> list(arr->size());
        for (size_t i = 0; i < arr->size(); ++i) {
            if (auto err = read_source(*arr->get(i), i, list[i]); !err.empty()) return err;
            for (size_t j = 0; j < i; ++j)
                if (list[j].name == list[i].name)
                    return std::string(1, '[') + std::to_string(i) + "].name: " + quote(list[i].name) +
                           " is already the name of source [" + std::to_string(j) + "]";
        }
        cfg.data.sources = std::move(list);
        return "";
    };
    f.write = [](const Config& cfg) {
        std::string out = "[";
        for (size_t i = 0; i < cfg.data.sources.size(); ++i) {
            const DataSource& s = cfg.data.sources[i];
            out += std::string(i ? ",\n  " : "\n  ") + "{ name = " + quote(s.name) + ", path = " + quote(s.path) +
                   ", weight = " + value_text(s.weight) + ", val = " + quote(s.val) + " }";
        }
        return out + (cfg.data.sources.empty() ? "]" : ",\n]");
    };
    return f;
}

/// "<key>: <complaint>", or "<key>[i]: ..." for a list element's complaint.
std::string complaint(const Field& f, const std::string& err) {
    return f.name() + (err.front() == '[' ? "" : ": ") + err;
}

/// data.train, left out of to_toml beside data.sources (both set is an error: config_checks.cpp).
Field train_field() {
    Field f = field("data", "train", &Config::data, &DataConfig::train, non_empty());
    f.omit = [](const Config& cfg) { return !cfg.data.sources.empty(); };
    return f;
}

/// Every key, in section order and in the order to_toml prints them (docs/configuration.md mirrors it).
const std::vector<Field>& fields() {
    using C = Config;
    static const std::vector<Field> all = {
        field("run", "name", &C::run, &RunConfig::name, non_empty()),
        field("run", "run_dir", &C::run, &RunConfig::run_dir, non_empty()),
        field("run", "backend", &C::run, &RunConfig::backend, one_of({"cpu", "cuda", "auto"})),
        field("run", "seed", &C::run, &RunConfig::seed),
        field("run", "max_steps", &C::run, &RunConfig::max_steps, at_least(1)),
        field("run", "log_interval", &C::run, &RunConfig::log_interval, at_least(1)),
        field("run", "eval_interval", &C::run, &RunConfig::eval_interval, at_least(0)),
        field("run", "eval_steps", &C::run, &RunConfig::eval_steps, at_least(0)),
        field("run", "eval_hellaswag_interval", &C::run, &RunConfig::eval_hellaswag_interval, at_least(0)),
        field("run", "eval_hellaswag_items", &C::run, &RunConfig::eval_hellaswag_items, at_least(0)),
        field("run", "sample_interval", &C::run, &RunConfig::sample_interval, at_least(0)),
        field("run", "sample_tokens", &C::run, &RunConfig::sample_tokens, at_least(1)),
        field("run", "sample_top_k", &C::run, &RunConfig::sample_top_k, at_least(1)),
        field("run", "sample_temperature", &C::run, &RunConfig::sample_temperature, positive<float>()),
        field("run", "peak_flops", &C::run, &RunConfig::peak_flops, non_negative<double>()),
        list_field("run", "trace", &C::run, &RunConfig::trace, at_least(1)),

        field("model", "n_layer", &C::model, &ModelConfig::n_layer, at_least(1)),
        field("model", "n_head", &C::model, &ModelConfig::n_head, at_least(1)),
        field("model", "n_embd", &C::model, &ModelConfig::n_embd, at_least(1)),
        field("model", "seq_len", &C::model, &ModelConfig::seq_len, at_least(1)),
        field("model", "vocab_size", &C::model, &ModelConfig::vocab_size,
              between(2, std::numeric_limits<int>::max())),
        field("model", "arch", &C::model, &ModelConfig::arch, one_of({"gpt2", "llama"})),
        field("model", "n_kv_head", &C::model, &ModelConfig::n_kv_head, at_least(0)),
        field("model", "intermediate_size", &C::model, &ModelConfig::intermediate_size, at_least(0)),
        field("model", "multiple_of", &C::model, &ModelConfig::multiple_of, at_least(1)),
        field("model", "norm_eps", &C::model, &ModelConfig::norm_eps, positive<float>()),
        field("model", "rope_theta", &C::model, &ModelConfig::rope_theta, positive<float>()),
        field("model", "tie_embeddings", &C::model, &ModelConfig::tie_embeddings),
        field("model", "head_dim", &C::model, &ModelConfig::head_dim, at_least(0)),
        field("model", "qk_norm", &C::model, &ModelConfig::qk_norm),
        field("model", "attention", &C::model, &ModelConfig::attention, one_of({"auto", "native", "cublas", "cudnn"})),
        field("model", "attention_workspace_mb", &C::model, &ModelConfig::attention_workspace_mb, at_least(1)),
        field("model", "matmul_autotune", &C::model, &ModelConfig::matmul_autotune),
        field("model", "init_from", &C::model, &ModelConfig::init_from),
        field("model.moe", "n_experts", &C::moe, &MoeConfig::n_experts, at_least(0)),
        field("model.moe", "top_k", &C::moe, &MoeConfig::top_k, at_least(1)),
        field("model.moe", "n_shared_experts", &C::moe, &MoeConfig::n_shared_experts, at_least(0)),
        field("model.moe", "expert_ffn", &C::moe, &MoeConfig::expert_ffn, at_least(0)),
        field("model.moe", "router", &C::moe, &MoeConfig::router, one_of({"softmax", "sigmoid"})),
        field("model.moe", "aux_loss_coef", &C::moe, &MoeConfig::aux_loss_coef, non_negative<float>()),
        field("model.moe", "bias_update_rate", &C::moe, &MoeConfig::bias_update_rate, non_negative<float>()),
        field("model.moe", "capacity_factor", &C::moe, &MoeConfig::capacity_factor, non_negative<float>()),

        train_field(),
        field("data", "val", &C::data, &DataConfig::val, non_empty()),
        sources_field(),
        field("data", "hellaswag", &C::data, &DataConfig::hellaswag),
        field("data", "document_mask", &C::data, &DataConfig::document_mask),
        field("data", "reset_position_ids", &C::data, &DataConfig::reset_position_ids),

        field("training", "micro_batch_size", &C::training, &TrainingConfig::micro_batch_size, at_least(1)),
        field("training", "global_batch_size", &C::training, &TrainingConfig::global_batch_size, at_least(0)),
        field("training", "grad_accum_steps", &C::training, &TrainingConfig::grad_accum_steps, at_least(0)),
        field("training", "precision", &C::training, &TrainingConfig::precision, one_of({"fp32", "bf16"})),
        field("training", "grad_clip", &C::training, &TrainingConfig::grad_clip, non_negative<float>()),
        field("training", "stochastic_rounding", &C::training, &TrainingConfig::stochastic_rounding),
        field("training", "fp8", &C::training, &TrainingConfig::fp8, one_of({"off", "tensorwise", "rowwise"})),
        field("training", "max_skipped_steps", &C::training, &TrainingConfig::max_skipped_steps, at_least(1)),

        field("optimizer", "lr", &C::optimizer, &OptimizerConfig::lr, positive<float>()),
        field("optimizer", "beta1", &C::optimizer, &OptimizerConfig::beta1, unit_interval(true)),
        field("optimizer", "beta2", &C::optimizer, &OptimizerConfig::beta2, unit_interval(true)),
        field("optimizer", "eps", &C::optimizer, &OptimizerConfig::eps, positive<float>()),
        field("optimizer", "weight_decay", &C::optimizer, &OptimizerConfig::weight_decay, non_negative<float>()),
        field("optimizer", "offload", &C::optimizer, &OptimizerConfig::offload, one_of({"none", "cpu"})),
        field("optimizer", "offload_fraction", &C::optimizer, &OptimizerConfig::offload_fraction, fraction()),
        field("optimizer", "offload_chunk_mb", &C::optimizer, &OptimizerConfig::offload_chunk_mb, positive<float>()),

        field("lr_schedule", "decay", &C::lr_schedule, &LRScheduleConfig::decay,
              one_of({"cosine", "linear", "constant", "wsd"})),
        field("lr_schedule", "warmup_steps", &C::lr_schedule, &LRScheduleConfig::warmup_steps, at_least(0)),
        field("lr_schedule", "min_lr", &C::lr_schedule, &LRScheduleConfig::min_lr, non_negative<float>()),
        field("lr_schedule", "decay_ratio", &C::lr_schedule, &LRScheduleConfig::decay_ratio, unit_interval(false)),
        field("lr_schedule", "decay_type", &C::lr_schedule, &LRScheduleConfig::decay_type,
              one_of({"linear", "sqrt", "cosine"})),

        field("parallel", "dp", &C::parallel, &ParallelConfig::dp, at_least(0)),
        field("parallel", "pp", &C::parallel, &ParallelConfig::pp, at_least(1)),
        field("parallel", "tp", &C::parallel, &ParallelConfig::tp, at_least(1)),
        field("parallel", "sequence_parallel", &C::parallel, &ParallelConfig::sequence_parallel),
        field("parallel", "cp", &C::parallel, &ParallelConfig::cp, at_least(1)),
        field("parallel", "ep", &C::parallel, &ParallelConfig::ep, at_least(1)),
        field("parallel", "zero_stage", &C::parallel, &ParallelConfig::zero_stage, between(0, 3)),
        field("parallel", "zero_group_size", &C::parallel, &ParallelConfig::zero_group_size, at_least(0)),
        field("parallel", "grad_reduce_dtype", &C::parallel, &ParallelConfig::grad_reduce_dtype, one_of({"fp32", "bf16"})),
        field("parallel", "timeout_s", &C::parallel, &ParallelConfig::timeout_s, non_negative<double>()),
        field("parallel", "comm", &C::parallel, &ParallelConfig::comm, one_of({"auto", "nccl", "mpi"})),
        field("parallel", "hierarchical_allreduce", &C::parallel, &ParallelConfig::hierarchical_allreduce),
        field("parallel", "overlap_grad_reduce", &C::parallel, &ParallelConfig::overlap_grad_reduce),

        list_field("pipeline", "layers_per_stage", &C::pipeline, &PipelineConfig::layers_per_stage, at_least(1)),
        field("pipeline", "schedule", &C::pipeline, &PipelineConfig::schedule, pipeline_schedule()),
        field("pipeline", "plan", &C::pipeline, &PipelineConfig::plan, one_of({"none", "auto"})),
        field("pipeline", "plan_memory_gib", &C::pipeline, &PipelineConfig::plan_memory_gib, non_negative<double>()),

        field("activation_checkpoint", "ratio", &C::activation_checkpoint, &ActivationCheckpointConfig::ratio,
              unit_interval(false)),
        list_field("activation_checkpoint", "ratio_per_stage", &C::activation_checkpoint,
                   &ActivationCheckpointConfig::ratio_per_stage, unit_interval(false)),
        list_field("activation_checkpoint", "layers_per_stage", &C::activation_checkpoint,
                   &ActivationCheckpointConfig::layers_per_stage, at_least(0)),

        field("checkpoint", "interval", &C::checkpoint, &CheckpointConfig::interval, at_least(0)),
        field("checkpoint", "at_end", &C::checkpoint, &CheckpointConfig::at_end),
        field("checkpoint", "keep_last", &C::checkpoint, &CheckpointConfig::keep_last, at_least(0)),
        field("checkpoint", "resume", &C::checkpoint, &CheckpointConfig::resume, non_empty()),
        field("checkpoint", "overwrite", &C::checkpoint, &CheckpointConfig::overwrite),
        field("checkpoint", "async", &C::checkpoint, &CheckpointConfig::async),
        field("checkpoint", "timeout_s", &C::checkpoint, &CheckpointConfig::timeout_s, non_negative<double>()),

        field("metrics", "enabled", &C::metrics, &MetricsConfig::enabled),
        field("metrics", "listen", &C::metrics, &MetricsConfig::listen, listen_address()),
    };
    return all;
}

const std::vector<std::string>& section_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const auto& f : fields())
            if (v.empty() || v.back() != f.section) v.push_back(f.section);
        return v;
    }();
    return names;
}

const Field* find_field(const std::string& section, const std::string& key) {
    for (const auto& f : fields())
        if (f.section == section && f.key == key) return &f;
    return nullptr;
}

/// Levenshtein distance (Wagner-Fischer, one row), for "did you mean" hints.
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

/// " (did you mean optimizer.lr?)" for a key that lives in another section or is misspelt; else "".
std::string hint_for_key(const std::string& section, const std::string& key) {
    for (const auto& f : fields())
        if (f.key == key) return " (did you mean " + f.name() + "?)";
    const Field* best = nullptr;
    size_t best_d = 3;  // at most 2 edits away
    for (const auto& f : fields())
        if (f.section == section)
            if (size_t d = edit_distance(key, f.key); d < best_d) best = &f, best_d = d;
    return best ? " (did you mean " + best->name() + "?)" : "";
}

std::string hint_for_section(const std::string& section) {
    std::string best;
    size_t best_d = 3;
    for (const auto& s : section_names())
        if (size_t d = edit_distance(section, s); d < best_d) best = s, best_d = d;
    if (!best.empty()) return " (did you mean [" + best + "]?)";
    std::string all;
    for (const auto& s : section_names()) all += (all.empty() ? "" : ", ") + s;
    return " (sections: " + all + ")";
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// Where each key was last set: "file:line:col" or "--set ..."; keys left at their default are absent.
using Origins = ConfigOrigins;  // app/config/config_checks.hpp

std::string position(const std::string& file, const toml::source_region& src) {
    if (src.begin.line == 0) return file;
    return file + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw ConfigError(where + ": " + what); }

std::string read_file(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) fail(path, "cannot read config file: it is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, std::string("cannot open config file: ") + std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) fail(path, std::string("cannot read config file: ") + std::strerror(errno));
    return text.str();
}

/// Applies the keys of one section's table; a sub-table that is a known section ([model.moe]) in turn.
void apply_section(const std::string& section, const toml::table& table, const std::string& file, Config& cfg,
                   Origins& origins) {
    for (const auto& [key, node] : table) {
        const std::string k(key.str()), sub = section + "." + k;
        if (node.is_table() && std::find(section_names().begin(), section_names().end(), sub) != section_names().end()) {
            apply_section(sub, *node.as_table(), file, cfg, origins);
            continue;
        }
        const Field* f = find_field(section, k);
        if (!f) fail(position(file, key.source()), section + "." + k + ": unknown key" + hint_for_key(section, k));
        const std::string where = position(file, node.source());
        if (auto err = f->read(node, cfg); !err.empty()) fail(where, complaint(*f, err));
        origins[f->name()] = where;
    }
}

/// Applies every key of a parsed document to cfg; `file` names it in messages.
void apply_document(const toml::table& doc, const std::string& file, Config& cfg, Origins& origins) {
    for (const auto& [sec_key, sec_node] : doc) {
        const std::string section(sec_key.str());
        const std::string at = position(file, sec_key.source());
        const bool known = std::find(section_names().begin(), section_names().end(), section) != section_names().end();
        if (!sec_node.is_table()) {
            if (known) fail(at, "[" + section + "] must be a table, got " + describe(sec_node));
            // A bare key at the top level: usually a key whose [section] header is missing.
            fail(at, section + ": keys must be inside a [section]" + hint_for_key("", section));
        }
        if (!known) fail(at, "unknown section [" + section + "]" + hint_for_section(section));
        apply_section(section, *sec_node.as_table(), file, cfg, origins);
    }
}

/// Applies one "section.key=value" override; the value is TOML ("strings need quotes").
void apply_override(const std::string& ov, Config& cfg, Origins& origins) {
    const std::string where = "--set " + ov;
    const auto eq = ov.find('=');
    const auto trim = [](std::string s) {
        const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
        return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    const std::string name = trim(ov.substr(0, eq));
    const auto dot = name.rfind('.');  // the key is after the last dot: model.moe.top_k is [model.moe] top_k
    if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == name.size())
        fail(where, "expected section.key=value, e.g. --set run.max_steps=50");
    const std::string section = name.substr(0, dot), key = name.substr(dot + 1);
    const Field* f = find_field(section, key);
    if (!f) fail("--set " + name + "=...", "unknown key" + hint_for_key(section, key));
    toml::table doc;
    try {
        doc = toml::parse("value = " + ov.substr(eq + 1), std::string_view("--set"));
    } catch (const toml::parse_error& e) {
        fail(where, f->name() + ": the value is not valid TOML (" + std::string(e.description()) +
                        "); strings need quotes, e.g. --set run.name='\"demo\"'");
    }
    if (doc.size() != 1 || !doc.contains("value"))
        fail(where, f->name() + ": expected exactly one TOML value after '='");
    if (auto err = f->read(*doc.get("value"), cfg); !err.empty()) fail(where, complaint(*f, err));
    origins[f->name()] = where;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
    Config cfg;
    Origins origins;
    if (!path.empty()) {
        const std::string text = read_file(path);
        toml::table doc;
        try {
            doc = toml::parse(text, std::string_view(path));
        } catch (const toml::parse_error& e) {
            fail(position(path, e.source()), "TOML syntax error: " + std::string(e.description()));
        }
        apply_document(doc, path, cfg, origins);
    }
    for (const auto& ov : overrides) apply_override(ov, cfg, origins);
    // Unset, gradients travel in the training precision: under bf16 no cast path (docs/configuration.md).
    if (!origins.count("parallel.grad_reduce_dtype")) cfg.parallel.grad_reduce_dtype = cfg.training.precision;
    check_across_keys(cfg, origins, path);
    return cfg;
}

void resolve_batch(Config& cfg, int dp) {
    if (dp < 1) throw ConfigError("resolve_batch: dp must be >= 1, got " + std::to_string(dp));
    auto& t = cfg.training;
    const int64_t per_step = int64_t(t.micro_batch_size) * dp;  // sequences per micro-step, all ranks
    int64_t global = t.global_batch_size, accum = t.grad_accum_steps;
    if (global == 0) {
        accum = std::max<int64_t>(accum, 1);
        global = per_step * accum;
    } else if (accum == 0) {
        if (global % per_step != 0)
            throw ConfigError("training.global_batch_size: expected a multiple of micro_batch_size (" +
                              std::to_string(t.micro_batch_size) + ") x dp (" + std::to_string(dp) + ") = " +
                              std::to_string(per_step) + ", got " + std::to_string(global));
        accum = global / per_step;
    } else if (global != per_step * accum) {
        throw ConfigError("training.global_batch_size: expected micro_batch_size (" +
                          std::to_string(t.micro_batch_size) + ") x dp (" + std::to_string(dp) +
                          ") x grad_accum_steps (" + std::to_string(accum) + ") = " +
                          std::to_string(per_step * accum) + ", got " + std::to_string(global));
    }
    if (global > std::numeric_limits<int>::max())
        throw ConfigError("training.global_batch_size: micro_batch_size x dp x grad_accum_steps = " +
                          std::to_string(global) + " exceeds 2147483647");
    t.global_batch_size = static_cast<int>(global);
    t.grad_accum_steps = static_cast<int>(accum);
}

std::string to_toml(const Config& cfg) {
    std::string out = "# llmtrain config: every key (docs/configuration.md explains each one)\n";
    std::string section;
    for (const auto& f : fields()) {
        if (f.section != section) {
            section = f.section;
            out += "\n[" + section + "]\n";
        }
        if (f.omit && f.omit(cfg)) continue;
        out += f.key + " = " + f.write(cfg) + "\n";
    }
    return out;
}

}  // namespace llmtrain
