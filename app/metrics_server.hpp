// app/metrics_server.hpp — a minimal HTTP/1.1 server for GET /metrics on one listening socket.
//
// Why not prometheus::Exposer: Debian's civetweb runs its workers on 100 KiB stacks, and glibc takes
// a process's static TLS out of them; with OpenBLAS linked (60 KiB TLS) a scrape overflows the stack
// and crashes llmtrain. This server runs on one std::thread with a normal stack, answers one request
// per connection (Connection: close) and stops at once.
#pragma once
#include <functional>
#include <string>
#include <thread>

#include "app/metrics.hpp"

namespace llmtrain {

class MetricsServer {
public:
    /// Binds addr (host resolved as IPv4; port 0: the OS picks) and starts serving: GET or HEAD of
    /// /metrics answers 200 with body() as text/plain (Prometheus text format 0.0.4), other paths 404,
    /// other methods 405. Errors: MetricsError naming "host:port" and the system's reason (e.g.
    /// "Address already in use") when the host does not resolve or the socket cannot be bound.
    MetricsServer(const ListenAddress& addr, std::function<std::string()> body);
    ~MetricsServer();  ///< stops the thread and closes the socket
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    int port() const { return port_; }  ///< the bound port

private:
    void serve();
    void answer(int conn);

    std::function<std::string()> body_;
    int listen_fd_ = -1;
    int wake_fd_[2] = {-1, -1};  ///< a pipe: writing to [1] ends serve()
    int port_ = 0;
    std::thread thread_;
};

}  // namespace llmtrain
