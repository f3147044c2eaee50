// tests/metrics/http_client.hpp — a tiny blocking HTTP/1.1 client over loopback for the metrics tests.
// One request per connection; the response is read until the server closes (it answers with
// Connection: close). 5 s timeouts on connect, send and receive turn a hung server into a failed test.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace llmtrain::test {

/// A TCP connection to 127.0.0.1:port (fd -1 when connect failed); closed on destruction.
struct LoopbackSocket {
    int fd = -1;
    explicit LoopbackSocket(int port) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return;
        timeval tv{5, 0};  // bounds connect (SO_SNDTIMEO on Linux), send and each read
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            close(fd);
            fd = -1;
        }
    }
    ~LoopbackSocket() {
        if (fd >= 0) close(fd);
    }
    LoopbackSocket(const LoopbackSocket&) = delete;
    LoopbackSocket& operator=(const LoopbackSocket&) = delete;
};

/// Sends `request` to 127.0.0.1:port and returns the whole response ("" on any failure).
inline std::string http(int port, const std::string& request) {
    LoopbackSocket s(port);
    std::string out;
    if (s.fd < 0 || send(s.fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) return out;
    char buf[4096];
    ssize_t n;
    while ((n = read(s.fd, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    return out;
}

/// The body of GET http://127.0.0.1:port/path ("" on any failure).
inline std::string http_get(int port, const std::string& path) {
    const std::string out = http(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const auto body = out.find("\r\n\r\n");
    return body == std::string::npos ? "" : out.substr(body + 4);
}

}  // namespace llmtrain::test
