// tests/metrics/metrics_load_test.cpp — /metrics stays fast while idle and slow clients hold
// connections, and idle ones are dropped after MetricsServer::kIdleTimeoutSeconds.
//
// Why this can fail: the endpoint before libmicrohttpd served one connection at a time on one
// thread (accept, then a blocking read with a 2 s timeout) behind a listen backlog of 16. Five TCP
// connections that sent nothing made `curl .../metrics` time out after 10 s, and about 20 filled the
// backlog. Measured against that design: this test failed after 6 s (only 21 of the 100 idle
// connections got through connect in 5 s); with 5 idle connections, the first scrape got no answer
// within the client's 5 s timeout.
// Reference: every scrape must be a complete 200 answer carrying the value the test set; latency
// bound p99 < 100 ms (a local scrape of this registry takes about a millisecond).
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "app/report/metrics.hpp"
#include "app/report/metrics_server.hpp"
#include "http_client.hpp"

using namespace llmtrain;
using namespace llmtrain::test;
using Clock = std::chrono::steady_clock;

namespace {

/// Ten connections that each send one byte of a valid request per second from a thread, until
/// stopped or the request is complete (at most request.size() seconds).
class SlowClients {
public:
    explicit SlowClients(int port) {
        for (int i = 0; i < 10; ++i) socks_.push_back(std::make_unique<LoopbackSocket>(port));
        thread_ = std::thread([this] {
            const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
            std::unique_lock<std::mutex> lk(m_);
            for (size_t i = 0; i < request.size() && !stop_; ++i) {
                for (auto& s : socks_) send(s->fd, &request[i], 1, MSG_NOSIGNAL);
                ++bytes_sent_;
                cv_.wait_for(lk, std::chrono::seconds(1), [this] { return stop_; });
            }
        });
    }
    ~SlowClients() {
        {
            std::lock_guard<std::mutex> lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    bool all_connected() const {
        return std::all_of(socks_.begin(), socks_.end(), [](const auto& s) { return s->fd >= 0; });
    }
    int bytes_sent() {
        std::lock_guard<std::mutex> lk(m_);
        return bytes_sent_;
    }

private:
    std::vector<std::unique_ptr<LoopbackSocket>> socks_;
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
    int bytes_sent_ = 0;
    std::thread thread_;
};

/// True if the server has closed `fd` (EOF readable) within timeout_ms.
bool closed_by_server(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) return false;
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

}  // namespace

TEST(MetricsLoad, ScrapesStayFastWithIdleAndSlowClients) {
    Metrics m("127.0.0.1:0", 0, "load", 0);  // the class the trainer uses
    m.set_step(7);
    const int port = m.port();
    const auto t_open = Clock::now();

    std::vector<std::unique_ptr<LoopbackSocket>> idle;
    for (int i = 0; i < 100; ++i) {
        idle.push_back(std::make_unique<LoopbackSocket>(port));
        ASSERT_GE(idle.back()->fd, 0) << "idle connection " << i << " failed";
        ASSERT_LT(Clock::now() - t_open, std::chrono::seconds(5)) << "only " << i + 1 << " idle connections in 5 s";
    }
    SlowClients slow(port);
    ASSERT_TRUE(slow.all_connected());
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the slow clients have sent 2 bytes

    const std::string want = "llmtrain_step{rank=\"0\",run=\"load\"} 7\n";
    std::vector<double> ms;
    for (int i = 0; i < 100; ++i) {
        const auto t0 = Clock::now();
        const std::string r = http(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        ASSERT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << "scrape " << i << " after " << ms.back() << " ms:\n" << r;
        ASSERT_NE(r.find(want), std::string::npos) << "scrape " << i << ":\n" << r;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // spread over the slow clients' bytes
    }
    std::sort(ms.begin(), ms.end());
    const double p50 = ms[49], p99 = ms[98];  // nearest rank of 100 samples
    std::printf("100 scrapes with 100 idle + 10 slow clients: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", p50, p99,
                ms.back());
    EXPECT_LT(p99, 100.0);
    EXPECT_GE(slow.bytes_sent(), 3) << "the slow clients were not sending during the scrapes";

    // The idle connections were still open during the scrapes (so the test exercised them) ...
    const double open_s = std::chrono::duration<double>(Clock::now() - t_open).count();
    ASSERT_LT(open_s, MetricsServer::kIdleTimeoutSeconds - 1.0) << "scrapes too slow to tell the timeout apart";
    for (const auto& s : idle) ASSERT_FALSE(closed_by_server(s->fd, 0)) << "closed before the idle timeout";
    // ... and the server drops them once they have been silent for the idle timeout (+ 5 s slack).
    const auto deadline = t_open + std::chrono::seconds(MetricsServer::kIdleTimeoutSeconds + 5);
    for (const auto& s : idle) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        ASSERT_TRUE(closed_by_server(s->fd, int(std::max<long long>(left, 0))))
            << "an idle connection outlived the timeout";
    }
    const double closed_s = std::chrono::duration<double>(Clock::now() - t_open).count();
    std::printf("idle connections closed by the server %.1f s after they opened (timeout %u s)\n", closed_s,
                MetricsServer::kIdleTimeoutSeconds);
    EXPECT_GE(closed_s, MetricsServer::kIdleTimeoutSeconds - 1.0);
}
