// tools/prep/corpus.cpp — input expansion and document streaming for llmtrain-prep (see .hpp).
#include "tools/prep/corpus.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>

namespace llmtrain::prep {

std::vector<std::string> expand_inputs(const std::vector<std::string>& args) {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    for (const std::string& arg : args) {
        if (arg.find_first_of("*?[") == std::string::npos) {
            std::error_code ec;
            if (!fs::exists(arg, ec)) throw PrepError("input " + arg + ": no such file");
            if (fs::is_directory(arg, ec))
                throw PrepError("input " + arg + ": is a directory (give a glob such as '" + arg + "/*.txt')");
            files.push_back(arg);
            continue;
        }
        glob_t g{};
        int rc = ::glob(arg.c_str(), 0, nullptr, &g);
        if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
            globfree(&g);
            throw PrepError("input pattern '" + arg + "' matches no file");
        }
        if (rc != 0) {
            globfree(&g);
            throw PrepError("input pattern '" + arg + "': glob failed (read error or out of memory)");
        }
        size_t added = 0;
        for (size_t i = 0; i < g.gl_pathc; ++i) {
            std::error_code ec;
            if (fs::is_regular_file(g.gl_pathv[i], ec)) {
                files.push_back(g.gl_pathv[i]);
                ++added;
            }
        }
        globfree(&g);
        if (added == 0) throw PrepError("input pattern '" + arg + "' matches no regular file");
    }
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
    return files;
}

DocumentReader::DocumentReader(std::vector<std::string> files, std::string separator)
    : files_(std::move(files)), separator_(std::move(separator)) {}

bool DocumentReader::next_any(std::string& doc) {
    while (true) {
        if (!open_) {
            if (file_ == files_.size()) return false;
            in_ = std::ifstream(files_[file_], std::ios::binary);
            if (!in_) throw PrepError("input " + files_[file_] + ": cannot open for reading");
            open_ = true;
        }
        doc.clear();
        doc_file_ = file_;
        bool any_line = false;
        std::string line;
        while (std::getline(in_, line)) {
            if (!separator_.empty()) {
                std::string bare = line;
                if (!bare.empty() && bare.back() == '\r') bare.pop_back();
                if (bare == separator_) return true;
            }
            if (any_line) doc += '\n';
            doc += line;
            any_line = true;
        }
        if (in_.bad()) throw PrepError("input " + files_[file_] + ": read error");
        in_.close();
        open_ = false;
        ++file_;
        if (any_line || separator_.empty()) return true;  // an empty file is a (blank) document too
    }
}

bool DocumentReader::next(std::string& doc) {
    while (next_any(doc)) {
        if (doc.find_first_not_of(" \t\r\n\f\v") != std::string::npos) return true;
        ++skipped_;
    }
    return false;
}

}  // namespace llmtrain::prep
