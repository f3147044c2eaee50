// app/config/listen.hpp — metrics.listen's "host:port" grammar, in the config room so that the
// config check and the metrics endpoint (app/report/metrics.cpp) read it alike without config including metrics.
#pragma once
#include <string>

namespace llmtrain {

/// A parsed metrics.listen address.
struct ListenAddress {
    std::string host;  ///< IPv4 literal ("127.0.0.1") or host name ("localhost", resolved to IPv4)
    int port = 0;      ///< [0, 65535]; 0 = the OS picks a free port
};

/// Parses "host:port" strictly: a host is required (a bare port would bind every interface), the
/// port is decimal digits only. Errors: std::invalid_argument naming the address and what was expected.
ListenAddress parse_listen(const std::string& listen);

}  // namespace llmtrain
