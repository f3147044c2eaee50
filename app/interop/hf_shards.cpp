// app/interop/hf_shards.cpp — HF weight directories, single-file or sharded (see hf_shards.hpp).
#include "app/interop/hf_shards.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

namespace llmtrain {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

uint64_t data_bytes(const SafetensorOut& t, size_t es) {
    uint64_t n = es;
    for (int64_t d : t.shape) n *= uint64_t(d);
    return n;
}

/// "model-00002-of-00005.safetensors".
std::string shard_name(size_t k, size_t n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
    return buf;
}

/// Removes what an earlier export may have left in dir, so one layout never mixes with another.
void remove_stale(const fs::path& dir) {
    static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (n == "model.safetensors" || n == kHfIndexName || std::regex_match(n, shard)) fs::remove(e.path(), ec);
    }
}

}  // namespace

std::vector<std::string> write_hf_weights(const std::string& dir, const std::vector<SafetensorOut>& tensors,
                                          const std::string& dtype, const std::map<std::string, std::string>& metadata,
                                          uint64_t max_shard_bytes) {
    if (max_shard_bytes == 0) throw InteropError(dir + ": the shard size must be positive");
    const size_t es = dtype == "BF16" ? 2 : 4;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw InteropError(dir + ": cannot create the directory: " + ec.message());
    remove_stale(dir);
    // Greedy, in order, as save_pretrained splits: a new shard when the next tensor would not fit.
    std::vector<std::vector<SafetensorOut>> shards(1);
    uint64_t in_shard = 0, total = 0;
    for (const SafetensorOut& t : tensors) {
        const uint64_t b = data_bytes(t, es);
        if (!shards.back().empty() && in_shard + b > max_shard_bytes) {
            shards.emplace_back();
            in_shard = 0;
        }
        shards.back().push_back(t);
        in_shard += b;
        total += b;
    }
    if (shards.size() == 1) {
        write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, dtype, metadata);
        return {"model.safetensors"};
    }
    std::vector<std::string> files;
    json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
        files.push_back(shard_name(k + 1, shards.size()));
        write_safetensors((fs::path(dir) / files.back()).string(), shards[k], dtype, metadata);
        for (const SafetensorOut& t : shards[k]) index["weight_map"][t.name] = files.back();
    }
    const std::string path = (fs::path(dir) / kHfIndexName).string();
    std::ofstream f(path, std::ios::trunc);
    f << index.dump(2) << "\n";
    f.close();
    if (!f) throw InteropError(path + ": write failed");
    files.push_back(kHfIndexName);
    return files;
}

HfWeights::HfWeights(const std::string& path) {
    fs::path index;
    fs::path single;
    if (fs::is_directory(path)) {
        dir_ = path;
        if (fs::exists(fs::path(path) / kHfIndexName)) index = fs::path(path) / kHfIndexName;
        else if (fs::exists(fs::path(path) / "model.safetensors")) single = fs::path(path) / "model.safetensors";
        else
            throw InteropError(path + ": neither model.safetensors nor " + kHfIndexName +
                               " (a HuggingFace model directory holds one of them)");
    } else {
        dir_ = fs::path(path).parent_path().string();
        if (dir_.empty()) dir_ = ".";
        if (path.ends_with(".index.json")) index = path;
        else single = path;
    }
    if (!single.empty()) {
        source_ = single.string();
        readers_.push_back(std::make_unique<SafetensorsReader>(source_));
        tensors_ = readers_[0]->tensors();
        for (const auto& [name, info] : tensors_) file_index_[name] = 0;
        return;
    }
    source_ = index.string();
    std::ifstream f(index);
    if (!f) throw InteropError(source_ + ": cannot open");
    json j;
    try {
        j = json::parse(f);
    } catch (const json::parse_error& e) {
        throw InteropError(source_ + ": not JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw InteropError(source_ + ": no \"weight_map\" object (expected {\"metadata\": ..., \"weight_map\": "
                           "{tensor: shard file}})");
    std::map<std::string, size_t> by_file;
    for (const auto& [name, file] : j["weight_map"].items()) {
        if (!file.is_string())
            throw InteropError(source_ + ": weight_map[\"" + name + "\"]: expected a file name, got " + file.dump());
        const std::string shard = (index.parent_path() / file.get<std::string>()).string();
        auto [it, fresh] = by_file.emplace(shard, readers_.size());
        if (fresh) {
            if (!fs::exists(shard))
                throw InteropError(source_ + ": tensor " + name + ": its shard " + shard + " does not exist");
            readers_.push_back(std::make_unique<SafetensorsReader>(shard));
        }
        const auto& held = readers_[it->second]->tensors();
        const auto t = held.find(name);
        if (t == held.end())
            throw InteropError(shard + ": tensor " + name + " is not in this shard, but " + source_ +
                               "'s weight_map puts it there");
        tensors_[name] = t->second;
        file_index_[name] = it->second;
    }
}

const std::string& HfWeights::file_of(const std::string& name) const {
    const auto it = file_index_.find(name);
    return it == file_index_.end() ? source_ : readers_[it->second]->path();
}

void HfWeights::read_f32(const std::string& name, float* out) {
    const auto it = file_index_.find(name);
    if (it == file_index_.end()) throw InteropError(source_ + ": no tensor " + name);
    readers_[it->second]->read_f32(name, out);
}

}  // namespace llmtrain
