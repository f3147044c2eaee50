// data/tiktoken_file.cpp — a user's tiktoken ranks file, its special tokens, and the "tiktoken"
// container (see tiktoken_file.hpp). HuggingFace's JSON facts used here: tokenizer_config.json maps
// ids (as strings) to {"content": TEXT, ...} under "added_tokens_decoder" and names "eos_token" and
// "bos_token" (a string, or an object with "content"); tokenizer.json lists {"id", "content"} under
// "added_tokens".
#include "data/tiktoken_file.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/tiktoken_encodings.hpp"
#include "data/token_dataset.hpp"

namespace llmtrain {

namespace {

constexpr const char* kMagic = "llmtrain-tiktoken 1";

std::string read_all(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw DataError(what + " " + path + ": cannot read it (missing or unreadable)");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool all_digits(const std::string& s) {
    return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The special token named by `key` (its text, or its id in decimal), or nullptr.
const SpecialToken* find_special(const std::vector<SpecialToken>& specials, const std::string& key) {
    for (const SpecialToken& s : specials)
        if (s.text == key || (all_digits(key) && s.id == std::stol(key))) return &s;
    return nullptr;
}

// A JSON token entry: a string, or an object with "content" (HuggingFace's AddedToken); "" for null.
std::string token_text(const nlohmann::json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
    return "";
}

// Specials, eos and bos from a HuggingFace tokenizer_config.json or tokenizer.json.
void read_hf_json(const std::string& path, TiktokenFileSpec& spec, std::string& eos, std::string& bos) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(read_all(path, "special tokens file"));
    } catch (const nlohmann::json::exception& e) {
        throw DataError("special tokens file " + path + ": not JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw DataError("special tokens file " + path + ": expected a JSON object");
    try {
        if (j.contains("added_tokens_decoder")) {
            for (const auto& [key, value] : j["added_tokens_decoder"].items()) {
                if (!all_digits(key) || token_text(value).empty())
                    throw DataError("special tokens file " + path + ": added_tokens_decoder entry '" + key +
                                    "' is not {\"<id>\": {\"content\": TEXT}}");
                spec.specials.push_back({token_text(value), static_cast<int32_t>(std::stol(key))});
            }
        } else if (j.contains("added_tokens")) {
            for (const auto& t : j["added_tokens"]) {
                if (!t.contains("id") || !t["id"].is_number_integer() || token_text(t).empty())
                    throw DataError("special tokens file " + path + ": an added_tokens entry lacks id or content");
                spec.specials.push_back({token_text(t), t["id"].get<int32_t>()});
            }
        } else {
            throw DataError("special tokens file " + path +
                            ": has neither added_tokens_decoder (tokenizer_config.json) nor added_tokens (tokenizer.json)");
        }
        if (j.contains("eos_token")) eos = token_text(j["eos_token"]);
        if (j.contains("bos_token")) bos = token_text(j["bos_token"]);
    } catch (const nlohmann::json::exception& e) {
        throw DataError("special tokens file " + path + ": " + e.what());
    }
    spec.origin = path;
}

}  // namespace

std::string tiktoken_container_bytes(const TiktokenFileSpec& spec) {
    std::vector<SpecialToken> sorted = spec.specials;
    std::sort(sorted.begin(), sorted.end(), [](const SpecialToken& a, const SpecialToken& b) { return a.id < b.id; });
    std::string s = std::string(kMagic) + "\npattern " + spec.pattern + "\neos " + spec.eos + "\n";
    if (!spec.bos.empty()) s += "bos " + spec.bos + "\n";
    for (const SpecialToken& t : sorted) s += "special " + std::to_string(t.id) + " " + t.text + "\n";
    return s + "ranks\n" + spec.ranks;
}

TiktokenFileSpec parse_tiktoken_container(const std::string& bytes, const std::string& source) {
    TiktokenFileSpec spec;
    size_t pos = 0;
    int line_no = 0;
    auto next_line = [&]() -> std::string {
        const size_t nl = bytes.find('\n', pos);
        if (nl == std::string::npos)
            throw DataError(source + ": the tiktoken container ends at line " + std::to_string(line_no) +
                            " before its 'ranks' line");
        std::string line = bytes.substr(pos, nl - pos);
        pos = nl + 1;
        ++line_no;
        return line;
    };
    if (next_line() != kMagic) throw DataError(source + ": line 1 is not '" + std::string(kMagic) + "'");
    for (std::string line = next_line(); line != "ranks"; line = next_line()) {
        const size_t sp = line.find(' ');
        const std::string key = line.substr(0, sp), value = sp == std::string::npos ? "" : line.substr(sp + 1);
        const std::string where = source + ": line " + std::to_string(line_no);
        if (key == "pattern") {
            spec.pattern = value;
        } else if (key == "eos") {
            spec.eos = value;
        } else if (key == "bos") {
            spec.bos = value;
        } else if (key == "special") {
            const size_t sp2 = value.find(' ');
            const std::string id = value.substr(0, sp2);
            if (sp2 == std::string::npos || !all_digits(id)) throw DataError(where + ": expected 'special <id> <text>'");
            spec.specials.push_back({value.substr(sp2 + 1), static_cast<int32_t>(std::stol(id))});
        } else {
            throw DataError(where + ": unknown key '" + key + "' (pattern, eos, bos, special, ranks)");
        }
    }
    if (!find_tiktoken_encoding(spec.pattern)) throw DataError(source + ": unknown pattern '" + spec.pattern + "'");
    if (!find_special(spec.specials, spec.eos)) throw DataError(source + ": eos '" + spec.eos + "' is not a special token");
    if (!spec.bos.empty() && !find_special(spec.specials, spec.bos))
        throw DataError(source + ": bos '" + spec.bos + "' is not a special token");
    spec.ranks = bytes.substr(pos);
    spec.origin = source;
    return spec;
}

TiktokenFileSpec tiktoken_file_spec(const std::string& ranks_path, const SpecialTokenOptions& opt) {
    TiktokenFileSpec spec;
    spec.ranks = read_all(ranks_path, "tiktoken ranks file");
    std::string eos, bos;  // the JSON's defaults
    if (!opt.specials.empty()) {
        for (const std::string& s : opt.specials) {
            const size_t eq = s.rfind('=');
            const std::string id = eq == std::string::npos ? "" : s.substr(eq + 1);
            if (eq == 0 || !all_digits(id) || s.find('\n') != std::string::npos)
                throw DataError("--special '" + s + "': expected TEXT=ID, e.g. '<|begin_of_text|>=128000'");
            spec.specials.push_back({s.substr(0, eq), static_cast<int32_t>(std::stol(id))});
        }
        spec.origin = "--special";
    } else {
        namespace fs = std::filesystem;
        std::string file = opt.file;
        if (file.empty()) {
            const fs::path dir = fs::absolute(fs::path(ranks_path)).parent_path();
            for (const fs::path& d : {dir, dir.filename() == "original" ? dir.parent_path() : fs::path()})
                if (!d.empty() && fs::is_regular_file(d / "tokenizer_config.json")) {
                    file = (d / "tokenizer_config.json").string();
                    break;
                }
        }
        if (!file.empty()) {
            read_hf_json(file, spec, eos, bos);
        } else {
            const int n_ranks = static_cast<int>(std::count(spec.ranks.begin(), spec.ranks.end(), '\n') +
                                                 (!spec.ranks.empty() && spec.ranks.back() != '\n'));
            spec.specials = llama3_special_tokens(n_ranks);
            spec.origin = "Llama 3's default set (ids " + std::to_string(n_ranks) + ".." + std::to_string(n_ranks + 255) + ")";
        }
    }
    for (const SpecialToken& s : spec.specials)
        if (s.text.find('\n') != std::string::npos)
            throw DataError(spec.origin + ": special token '" + s.text + "' holds a line break");
    const std::string eos_from = !opt.eos.empty() ? "--eos" : "the eos_token of " + spec.origin;
    if (!opt.eos.empty()) eos = opt.eos;
    if (eos.empty()) eos = find_special(spec.specials, "<|end_of_text|>") ? "<|end_of_text|>" : "<|endoftext|>";
    const SpecialToken* e = find_special(spec.specials, eos);
    if (!e)
        throw DataError(ranks_path + ": the document separator (" + eos_from + " or the default) '" + eos +
                        "' is not among the special tokens of " + spec.origin + "; name one with --eos");
    spec.eos = e->text;
    if (!opt.bos.empty()) bos = opt.bos;
    if (bos.empty() && find_special(spec.specials, "<|begin_of_text|>")) bos = "<|begin_of_text|>";
    if (bos == "none") bos.clear();
    if (!bos.empty()) {
        const SpecialToken* b = find_special(spec.specials, bos);
        if (!b) throw DataError(ranks_path + ": bos '" + bos + "' is not among the special tokens of " + spec.origin);
        spec.bos = b->text;
    }
    return spec;
}

}  // namespace llmtrain
