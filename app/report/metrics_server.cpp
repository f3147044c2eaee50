// app/report/metrics_server.cpp — the /metrics endpoint on GNU libmicrohttpd (see metrics_server.hpp for
// the design and why not civetweb). API: MHD 0.9.75 (Debian libmicrohttpd-dev), microhttpd.h.
#include "app/report/metrics_server.hpp"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace llmtrain {

namespace {

/// MHD's messages while MHD_start_daemon runs on this thread (the reason a bind failed); messages
/// from MHD's own thread afterwards (misbehaving clients) are dropped.
thread_local std::string* t_start_log = nullptr;

void log_start(void*, const char* fmt, va_list ap) {
    if (!t_start_log) return;
    char line[512];
    std::vsnprintf(line, sizeof line, fmt, ap);
    *t_start_log += line;
}

/// MHD's access handler: one answer per request, queued on the first call (no request body is read).
MHD_Result answer(void* cls, MHD_Connection* conn, const char* url, const char* method, const char*, const char*,
                  size_t*, void**) {
    const auto& body = *static_cast<const std::function<std::string()>*>(cls);
    unsigned status = MHD_HTTP_OK;
    const char* type = "text/plain; version=0.0.4; charset=utf-8";
    std::string content;
    if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 && std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        type = "text/plain";
        content = "only GET and HEAD\n";
    } else if (std::strcmp(url, "/metrics") != 0) {  // MHD has already cut off any "?query"
        status = MHD_HTTP_NOT_FOUND;
        type = "text/plain";
        content = "llmtrain serves /metrics\n";
    } else {
        try {
            content = body();
        } catch (const std::exception& e) {  // an exception must not unwind through MHD's C frames
            status = MHD_HTTP_INTERNAL_SERVER_ERROR;
            type = "text/plain";
            content = std::string("metrics: ") + e.what() + "\n";
        }
    }
    MHD_Response* r = MHD_create_response_from_buffer(content.size(), content.data(), MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;  // out of memory: MHD closes the connection
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    const MHD_Result queued = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return queued;
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

    // MHD sets SO_REUSEADDR (a restarted run rebinds at once past TIME_WAIT) but not SO_REUSEPORT,
    // so a live listener on the port still makes the bind fail.
    std::string log;
    t_start_log = &log;
    // The port argument only names the port in MHD's messages; MHD_OPTION_SOCK_ADDR is what is bound.
    daemon_ = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, uint16_t(addr.port), nullptr, nullptr, &answer, &body_,
        MHD_OPTION_EXTERNAL_LOGGER, &log_start, nullptr,
        MHD_OPTION_SOCK_ADDR, reinterpret_cast<const sockaddr*>(&sa),  // this address only, never INADDR_ANY
        MHD_OPTION_CONNECTION_TIMEOUT, kIdleTimeoutSeconds,
        MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
        MHD_OPTION_THREAD_STACK_SIZE, kThreadStackBytes,
        MHD_OPTION_END);
    t_start_log = nullptr;
    if (!daemon_) {
        while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
        throw MetricsError(where + ": cannot listen: " + (log.empty() ? "libmicrohttpd did not start" : log));
    }
    const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    port_ = info ? info->port : 0;
    if (port_ == 0) {
        MHD_stop_daemon(daemon_);
        throw MetricsError(where + ": libmicrohttpd did not report the bound port");
    }
}

MetricsServer::~MetricsServer() { MHD_stop_daemon(daemon_); }

}  // namespace llmtrain
