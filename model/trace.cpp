// model/trace.cpp — the Chrome trace-event JSON writer (see trace.hpp).
#include "model/trace.hpp"

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace llmtrain {

namespace {

/// s as a JSON string literal (quotes, backslashes and control characters escaped).
std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

}  // namespace

void write_chrome_trace(const std::string& path, const std::string& process, int pid,
                        const std::vector<TraceSpan>& spans) {
    std::vector<std::string> tracks;
    auto tid_of = [&](const std::string& t) {
        for (size_t i = 0; i < tracks.size(); ++i)
            if (tracks[i] == t) return int(i);
        tracks.push_back(t);
        return int(tracks.size() - 1);
    };
    std::string body;
    char buf[160];
    for (const TraceSpan& s : spans) {
        std::snprintf(buf, sizeof buf, ", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f", pid,
                      tid_of(s.track), s.start * 1e6, s.duration * 1e6);
        body += ",\n  {\"name\": " + json_string(s.name) + buf + ", \"args\": {" + s.args + "}}";
    }
    std::string meta = "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) +
                       ", \"args\": {\"name\": " + json_string(process) + "}}";
    for (size_t i = 0; i < tracks.size(); ++i)
        meta += ",\n  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) + ", \"tid\": " +
                std::to_string(i) + ", \"args\": {\"name\": " + json_string(tracks[i]) + "}}";
    std::ofstream f(path);
    f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n" << meta << body << "\n]}\n";
    f.close();
    if (!f) throw std::runtime_error("trace: cannot write '" + path + "'");
}

}  // namespace llmtrain
