// app/config/listen.cpp — metrics.listen's grammar (see listen.hpp).
#include "app/config/listen.hpp"

#include <cctype>
#include <stdexcept>

namespace llmtrain {

namespace {

bool all_digits(const std::string& s) {
    if (s.empty()) return false;
    for (unsigned char ch : s)
        if (!std::isdigit(ch)) return false;
    return true;
}

/// An IPv4 literal (four decimal parts 0..255) or a host name (letters, digits, '-', '.').
/// IPv4 only (the server binds AF_INET).
bool valid_host(const std::string& h) {
    if (h.empty() || h.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") !=
                         std::string::npos)
        return false;
    if (h.find_first_not_of("0123456789.") != std::string::npos) return true;  // a name
    // All digits and dots: must be a dotted quad.
    int parts = 0;
    size_t start = 0;
    while (true) {
        const size_t dot = h.find('.', start);
        const std::string part = h.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (!all_digits(part) || part.size() > 3 || std::stoi(part) > 255) return false;
        ++parts;
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return parts == 4;
}

}  // namespace

ListenAddress parse_listen(const std::string& listen) {
    const auto colon = listen.rfind(':');
    if (colon == std::string::npos || colon == 0)
        throw std::invalid_argument("metrics.listen \"" + listen +
                           "\": expected host:port, e.g. 127.0.0.1:9400 (a bare port would bind every interface)");
    ListenAddress a;
    a.host = listen.substr(0, colon);
    const std::string port = listen.substr(colon + 1);
    if (!valid_host(a.host))
        throw std::invalid_argument("metrics.listen \"" + listen + "\": expected an IPv4 address or a host name before ':' (no IPv6), got \"" +
                           a.host + "\"");
    if (!all_digits(port) || port.size() > 5 || std::stoi(port) > 65535)
        throw std::invalid_argument("metrics.listen \"" + listen + "\": expected a port in [0, 65535] after ':', got \"" + port +
                           "\"");
    a.port = std::stoi(port);
    return a;
}

}  // namespace llmtrain
