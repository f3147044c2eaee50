// app/config/toml_text.cpp — values printed in TOML syntax (see toml_text.hpp).
#include "app/config/toml_text.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace llmtrain {
namespace {

/// Shortest decimal of a finite float/double that reads back to the same value, as a TOML float
/// (it always has a '.' or an exponent, so it is never read back as an integer).
template <class T>
std::string float_text(T v) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    std::string s(buf, res.ptr);
    if constexpr (std::is_same_v<T, float>) {
        // The loader reads a double and narrows it; if that double rounding ever lands elsewhere,
        // print the float's exact double value instead.
        if (static_cast<float>(std::strtod(s.c_str(), nullptr)) != v) {
            res = std::to_chars(buf, buf + sizeof buf, static_cast<double>(v));
            s.assign(buf, res.ptr);
        }
    }
    if (const auto e = s.find('e'); e != std::string::npos) {
        // to_chars writes "1e-04", "9.89e+14": drop the '+' and the exponent's leading zeros.
        size_t digits = e + 1;
        if (s[digits] == '+') s.erase(digits, 1);
        else if (s[digits] == '-') ++digits;
        while (s[digits] == '0' && digits + 1 < s.size()) s.erase(digits, 1);
    } else if (s.find('.') == std::string::npos) {
        s += ".0";
    }
    return s;
}

}  // namespace

std::string quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char ch : s) {
        switch (ch) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (ch < 0x20 || ch == 0x7f) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", ch);
                    out += buf;
                } else {
                    out += static_cast<char>(ch);
                }
        }
    }
    return out + "\"";
}

std::string value_text(int v) { return std::to_string(v); }
std::string value_text(uint64_t v) { return std::to_string(v); }
std::string value_text(float v) { return float_text(v); }
std::string value_text(double v) { return float_text(v); }
std::string value_text(bool v) { return v ? "true" : "false"; }
std::string value_text(const std::string& v) { return quote(v); }

}  // namespace llmtrain
