// app/report/metrics_server.hpp — the HTTP endpoint for GET /metrics, served by GNU libmicrohttpd (MHD).
//
// MHD runs one internal thread over epoll, so idle or slow clients never hold up a scrape: each
// connection is a small state machine, idle ones are dropped after kIdleTimeoutSeconds, and at most
// kMaxConnections are open at once (more are accepted and closed at once).
// Why not prometheus::Exposer (civetweb): Debian's civetweb runs its workers on 100 KiB stacks and
// glibc takes a process's static TLS out of every thread's stack; with OpenBLAS linked (about
// 60 KiB of TLS) a scrape overflowed the stack and crashed llmtrain. MHD's thread gets an explicit
// stack size (kThreadStackBytes) for the same reason.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "app/config/listen.hpp"
#include "app/report/metrics.hpp"

struct MHD_Daemon;

namespace llmtrain {

class MetricsServer {
public:
    static constexpr unsigned kIdleTimeoutSeconds = 10;  ///< a connection silent this long is closed
    static constexpr unsigned kMaxConnections = 256;     ///< open connections at once
    /// Stack of MHD's thread, bytes: a main thread's default, so the static TLS glibc carves out of it
    /// (OpenBLAS, CUDA libraries) leaves ample room; only touched pages cost memory.
    static constexpr size_t kThreadStackBytes = size_t{8} << 20;

    /// Binds addr (host resolved as IPv4, bound to that address only; port 0: the OS picks) and
    /// starts serving: GET or HEAD of /metrics answers 200 with body() as text/plain (Prometheus text
    /// format 0.0.4), other paths 404, other methods 405; every answer closes its connection.
    /// body() runs on MHD's thread and must be thread-safe. Errors: MetricsError naming
    /// "host:port" and the reason (e.g. "Address already in use") when the host does not resolve or
    /// the address cannot be bound.
    MetricsServer(const ListenAddress& addr, std::function<std::string()> body);
    ~MetricsServer();  ///< stops MHD's thread and closes every connection and the socket
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    int port() const { return port_; }  ///< the bound port

private:
    std::function<std::string()> body_;
    MHD_Daemon* daemon_ = nullptr;
    int port_ = 0;
};

}  // namespace llmtrain
