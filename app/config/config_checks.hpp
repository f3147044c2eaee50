// app/config/config_checks.hpp — the config checks that span several keys (a divisor of another key, a
// feature that needs another, the architecture's own rules): each error names the key at fault where
// the user set it ("file:line:col" or "--set ..."), so the message points at what to change.
#pragma once
#include <map>
#include <string>

#include "app/config/config.hpp"

namespace llmtrain {

/// Where each key was set, by "section.key": "file:line:col" or "--set section.key=value".
using ConfigOrigins = std::map<std::string, std::string>;

/// Checks c across keys. Errors: ConfigError "<origin of the first key at fault>: <key>: expected
/// ..., got ..." (the file, or "(built-in defaults)", when no key of the check was set).
void check_across_keys(const Config& c, const ConfigOrigins& origins, const std::string& file);

}  // namespace llmtrain
