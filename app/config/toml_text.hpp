// app/config/toml_text.hpp — values printed in TOML syntax, so that a printed config (to_toml, `--print-config`)
// reads back to the same values: strings quoted and escaped, floats as their shortest round-trip
// decimal, arrays in brackets. Used by app/config/config.cpp's key table and messages.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmtrain {

/// A TOML basic string: quotes, backslashes and control characters escaped; UTF-8 kept as is.
std::string quote(const std::string& s);

/// A value as TOML text: integers in decimal, floats as the shortest decimal that reads back to the
/// same float/double (always with '.' or an exponent, so never read back as an integer), booleans as
/// true/false, strings quoted.
std::string value_text(int v);
std::string value_text(uint64_t v);
std::string value_text(float v);
std::string value_text(double v);
std::string value_text(bool v);
std::string value_text(const std::string& v);

/// A TOML array: "[]", "[3, 3, 6]", "[0.5, 0.25]".
template <class T>
std::string value_text(const std::vector<T>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + value_text(v[i]);
    return out + "]";
}


}  // namespace llmtrain
