// app/config/key_checks.hpp — the range checks a config key may carry in config.cpp's table of keys
// (at_least, between, positive, one_of, ...): each returns "" for a fine value, else what was
// expected, which config.cpp turns into "<file:line:col>: <key>: expected <that>, got <value>".
// Apart from config.cpp's TOML reading so that file keeps to loading and the table itself.
#pragma once
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/config/listen.hpp"
#include "app/config/toml_text.hpp"
#include "parallel/schedule.hpp"

namespace llmtrain::key_checks {

/// A range check: "" when the value is fine, else what was expected ("an integer >= 1").
template <class T>
using Check = std::function<std::string(const T&)>;

inline Check<int> at_least(int lo) {
    return [lo](const int& v) { return v >= lo ? "" : "an integer >= " + std::to_string(lo); };
}

inline Check<int> between(int lo, int hi) {
    return [lo, hi](const int& v) {
        return v >= lo && v <= hi ? "" : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    };
}

template <class T>
Check<T> positive() {
    return [](const T& v) { return v > 0 ? "" : "a number > 0"; };
}

template <class T>
Check<T> non_negative() {
    return [](const T& v) { return v >= 0 ? "" : "a number >= 0"; };
}

/// (0, 1].
inline Check<float> fraction() {
    return [](const float& v) -> std::string { return v > 0 && v <= 1 ? "" : "a number in (0, 1]"; };
}

/// [0, 1) when open_top, else [0, 1].
inline Check<float> unit_interval(bool open_top) {
    return [open_top](const float& v) -> std::string {
        const bool ok = v >= 0 && (open_top ? v < 1 : v <= 1);
        return ok ? "" : open_top ? "a number in [0, 1)" : "a number in [0, 1]";
    };
}

inline Check<std::string> one_of(std::vector<std::string> allowed) {
    return [allowed](const std::string& v) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return "";
        std::string want = "one of";
        for (size_t i = 0; i < allowed.size(); ++i)  // piece by piece: literal + string trips GCC 12's -Wrestrict
            want.append(i ? ", " : " ").append(quote(allowed[i]));
        return want;
    };
}

inline Check<std::string> pipeline_schedule() {
    return [](const std::string& v) -> std::string {
        try {
            parse_pipeline_schedule(v);
            return "";
        } catch (const std::invalid_argument&) {
            return "one of \"1f1b\", \"gpipe\"";
        }
    };
}

inline Check<std::string> non_empty() {
    return [](const std::string& v) { return v.empty() ? "a non-empty string" : ""; };
}

inline Check<std::string> listen_address() {
    return [](const std::string& v) -> std::string {
        try {
            parse_listen(v);
            return "";
        } catch (const std::invalid_argument&) {
            return "\"host:port\" with a host (IPv4 address or host name) and a port in [0, 65535]; "
                   "a bare port would bind every interface";
        }
    };
}

}  // namespace llmtrain::key_checks
