// app/metrics_server.cpp — the /metrics HTTP server (see metrics_server.hpp for why it exists).
#include "app/metrics_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace llmtrain {

namespace {

/// Writes all of `data`; false on an error (the client went away).
bool write_all(int fd, const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += size_t(n);
    }
    return true;
}

}  // namespace

MetricsServer::MetricsServer(const ListenAddress& addr, std::function<std::string()> body)
    : body_(std::move(body)) {
    const std::string where = "metrics.listen " + addr.host + ":" + std::to_string(addr.port);
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (const int rc = getaddrinfo(addr.host.c_str(), nullptr, &hints, &found); rc != 0 || !found)
        throw MetricsError(where + ": cannot resolve the host: " + gai_strerror(rc));
    sockaddr_in sa = *reinterpret_cast<const sockaddr_in*>(found->ai_addr);
    freeaddrinfo(found);
    sa.sin_port = htons(uint16_t(addr.port));

    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw MetricsError(where + ": socket: " + std::strerror(errno));
    const int one = 1;  // a restarted run may rebind at once (TIME_WAIT); a live listener still blocks it
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(listen_fd_, 16) != 0) {
        const std::string why = std::strerror(errno);
        close(listen_fd_);
        throw MetricsError(where + ": cannot listen: " + why);
    }
    socklen_t len = sizeof sa;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    if (pipe2(wake_fd_, O_CLOEXEC) != 0) {
        close(listen_fd_);
        throw MetricsError(where + ": pipe: " + std::strerror(errno));
    }
    thread_ = std::thread([this] { serve(); });
}

MetricsServer::~MetricsServer() {
    const char stop = 1;
    (void)!write(wake_fd_[1], &stop, 1);
    thread_.join();
    close(listen_fd_);
    close(wake_fd_[0]);
    close(wake_fd_[1]);
}

void MetricsServer::serve() {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    while (true) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[1].revents) return;  // woken by the destructor
        if (!(fds[0].revents & POLLIN)) continue;
        const int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        answer(conn);
        close(conn);
    }
}

void MetricsServer::answer(int conn) {
    timeval timeout{2, 0};  // a stalled client cannot hold the server for long
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    std::string request;
    char buf[2048];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
        const ssize_t n = recv(conn, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        request.append(buf, size_t(n));
    }
    // Request line: METHOD SP TARGET SP VERSION
    const auto sp1 = request.find(' '), sp2 = request.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) return;
    const std::string method = request.substr(0, sp1);
    std::string target = request.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));

    std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", content;
    if (method != "GET" && method != "HEAD") {
        status = "405 Method Not Allowed";
        type = "text/plain";
        content = "only GET and HEAD\n";
    } else if (target != "/metrics") {
        status = "404 Not Found";
        type = "text/plain";
        content = "llmtrain serves /metrics\n";
    } else {
        content = body_();
    }
    std::string head = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                       "\r\nContent-Length: " + std::to_string(content.size()) + "\r\nConnection: close\r\n\r\n";
    if (write_all(conn, head) && method != "HEAD") write_all(conn, content);
}

}  // namespace llmtrain
