// tests/metrics/metrics_test.cpp — the Prometheus exporter, scraped over a plain loopback socket
// (tests/metrics/http_client.hpp).
// Reference: the values the test sets, and the Prometheus text exposition format (one sample per
// line: name{label="value",...} number); histogram buckets are cumulative counts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "app/config/listen.hpp"
#include "app/report/metrics.hpp"
#include "http_client.hpp"

using namespace llmtrain;
using namespace llmtrain::test;

namespace {

/// The samples of an exposition: "name{labels}" -> value, labels sorted by name (their order in
/// the exposition carries no meaning).
std::map<std::string, double> samples(const std::string& text) {
    std::map<std::string, double> out;
    std::istringstream in(text);
    std::string line;
    const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$)");
    const std::regex label(R"re(([a-zA-Z_]\w*)="([^"]*)")re");
    std::smatch m;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#' || !std::regex_match(line, m, sample)) continue;
        std::map<std::string, std::string> labels;
        const std::string inside = m[3];
        for (std::sregex_iterator it(inside.begin(), inside.end(), label), end; it != end; ++it)
            labels[(*it)[1]] = (*it)[2];
        std::string key = m[1];
        if (!labels.empty()) {
            std::string sep = "{";
            for (const auto& [k, v] : labels) key += sep + k + "=\"" + v + "\"", sep = ",";
            key += "}";
        }
        out[key] = std::stod(m[4]);  // stod reads "+Inf" too
    }
    return out;
}

/// A socket listening on 127.0.0.1 at an OS-picked port; closed on destruction.
struct Listener {
    int fd = -1, port = 0;
    Listener() {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        listen(fd, 1);
        socklen_t len = sizeof a;
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
        port = ntohs(a.sin_port);
    }
    ~Listener() { close(fd); }
};

}  // namespace

TEST(Metrics, ScrapeShowsEveryMetricWithRunAndRankLabels) {
    Metrics m("127.0.0.1:0", 5, "unit-run", 3);  // port 0: the offset does not apply
    ASSERT_GT(m.port(), 0);
    m.set_step(42);
    m.set_loss(3.25);
    m.set_val_loss(3.5);
    m.set_learning_rate(6e-4);
    m.set_grad_norm(0.75);
    m.add_tokens(4096);
    m.add_tokens(4096);
    m.set_tokens_per_second(2500.5);
    m.set_mfu(0.125);
    m.observe_step_seconds(0.003);
    m.observe_step_seconds(0.3);
    m.observe_step_seconds(250);  // beyond the last bucket: only +Inf
    m.set_memory_bytes("params", 1048576);
    m.set_memory_bytes("activations", 2048);
    m.set_memory_bytes("params", 4096);  // replaces
    m.observe_checkpoint_seconds(1.5);
    m.observe_checkpoint_seconds(0.5);
    m.set_attention("cudnn");
    m.set_attention("cublas");  // a fallback: the old path drops to 0
    m.add_restarts(2);

    const std::string text = http_get(m.port(), "/metrics");
    ASSERT_FALSE(text.empty()) << "no answer on port " << m.port();
    const auto s = samples(text);
    const std::string L = R"(rank="3",run="unit-run")";  // sorted by name, as samples() keys are
    const std::map<std::string, double> want = {
        {"llmtrain_step{" + L + "}", 42},
        {"llmtrain_loss{" + L + "}", 3.25},
        {"llmtrain_val_loss{" + L + "}", 3.5},
        {"llmtrain_learning_rate{" + L + "}", 6e-4},
        {"llmtrain_grad_norm{" + L + "}", 0.75},
        {"llmtrain_tokens_total{" + L + "}", 8192},
        {"llmtrain_tokens_per_second{" + L + "}", 2500.5},
        {"llmtrain_mfu_ratio{" + L + "}", 0.125},
        {"llmtrain_checkpoint_seconds{" + L + "}", 0.5},
        {"llmtrain_checkpoints_total{" + L + "}", 2},
        {"llmtrain_restarts_total{" + L + "}", 2},
        {"llmtrain_memory_bytes{category=\"params\"," + L + "}", 4096},
        {"llmtrain_memory_bytes{category=\"activations\"," + L + "}", 2048},
        {"llmtrain_attention_info{path=\"cublas\"," + L + "}", 1},
        {"llmtrain_attention_info{path=\"cudnn\"," + L + "}", 0},
        {"llmtrain_step_seconds_count{" + L + "}", 3},
        {"llmtrain_step_seconds_sum{" + L + "}", 250.303},
        {"llmtrain_step_seconds_bucket{le=\"0.001\"," + L + "}", 0},
        {"llmtrain_step_seconds_bucket{le=\"0.005\"," + L + "}", 1},
        {"llmtrain_step_seconds_bucket{le=\"0.25\"," + L + "}", 1},
        {"llmtrain_step_seconds_bucket{le=\"0.5\"," + L + "}", 2},
        {"llmtrain_step_seconds_bucket{le=\"100\"," + L + "}", 2},
        {"llmtrain_step_seconds_bucket{le=\"+Inf\"," + L + "}", 3},
    };
    for (const auto& [name, value] : want) {
        auto it = s.find(name);
        ASSERT_NE(it, s.end()) << name << " missing from:\n" << text;
        EXPECT_NEAR(it->second, value, 1e-9 * std::max(1.0, std::fabs(value))) << name;
    }
    // Types as Prometheus expects them; bucket bounds span 1 ms .. 100 s.
    for (const char* t : {"# TYPE llmtrain_loss gauge", "# TYPE llmtrain_tokens_total counter",
                          "# TYPE llmtrain_checkpoints_total counter", "# TYPE llmtrain_restarts_total counter",
                          "# TYPE llmtrain_step_seconds histogram",
                          "# TYPE llmtrain_memory_bytes gauge"})
        EXPECT_NE(text.find(t), std::string::npos) << t;
    int buckets = 0;
    for (const auto& [name, v] : s) buckets += name.rfind("llmtrain_step_seconds_bucket", 0) == 0;
    EXPECT_EQ(buckets, 17);  // 16 bounds + +Inf
}

// A trainer thread sets step i and adds 32 tokens per step under hold_scrapes() as fast as it can
// while the test scrapes: every scrape must read tokens_total = 32 x step exactly (the invariant
// the end-to-end test checks once; without the hold a scrape lands between the two updates).
TEST(Metrics, AScrapeSeesOneStepsValuesTogether) {
    Metrics m("127.0.0.1:0", 0, "hold", 0);
    std::atomic<bool> stop{false};
    std::thread trainer([&] {
        for (int64_t i = 1; !stop.load(); ++i) {
            auto one_step = m.hold_scrapes();
            m.set_step(i);
            std::this_thread::yield();  // widen the window a scrape would fall into without the hold
            m.add_tokens(32);
        }
    });
    const std::string L = R"(rank="0",run="hold")";
    int checked = 0;
    for (int k = 0; k < 200; ++k) {
        const auto s = samples(http_get(m.port(), "/metrics"));
        if (!s.count("llmtrain_step{" + L + "}")) continue;
        const double step = s.at("llmtrain_step{" + L + "}"), tokens = s.at("llmtrain_tokens_total{" + L + "}");
        EXPECT_EQ(tokens, 32 * step) << "scrape " << k;
        ++checked;
    }
    stop = true;
    trainer.join();
    EXPECT_GT(checked, 100);
}

TEST(Metrics, OnlyGetAndHeadOfMetricsAreServed) {
    Metrics m("localhost:0", 0, "r", 0);
    m.set_loss(1.5);
    const std::string get = http(m.port(), "GET /metrics?x=1 HTTP/1.1\r\n\r\n");
    EXPECT_EQ(get.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << get;
    const auto body = get.substr(get.find("\r\n\r\n") + 4);
    EXPECT_NE(get.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos) << get;
    EXPECT_NE(body.find("llmtrain_loss{rank=\"0\",run=\"r\"} 1.5"), std::string::npos) << body;
    const std::string head = http(m.port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
    EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");  // headers only
    EXPECT_EQ(http(m.port(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
    EXPECT_EQ(http(m.port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
    EXPECT_EQ(http(m.port(), "garbage\r\n\r\n"), "");  // no request line: closed without an answer
}

TEST(Metrics, PortOffsetIsAddedToANonZeroPort) {
    int free_port;
    {
        Listener probe;  // a port that was free a moment ago
        free_port = probe.port;
    }
    Metrics m("127.0.0.1:" + std::to_string(free_port - 2), 2, "r", 2);
    EXPECT_EQ(m.port(), free_port);
    EXPECT_FALSE(http_get(free_port, "/metrics").empty());
}

TEST(Metrics, PortInUseIsAMetricsErrorNamingTheAddress) {
    Listener busy;
    const std::string addr = "127.0.0.1:" + std::to_string(busy.port);
    try {
        Metrics m(addr, 0, "r", 0);
        FAIL() << "bound a port that is in use";
    } catch (const MetricsError& e) {
        EXPECT_NE(std::string(e.what()).find(addr), std::string::npos) << e.what();
    }
    // Two exporters on one port: the second fails the same way.
    Metrics first("127.0.0.1:0", 0, "r", 0);
    EXPECT_THROW(Metrics("127.0.0.1:" + std::to_string(first.port()), 0, "r", 1), MetricsError);
    EXPECT_THROW(Metrics("127.0.0.1:65535", 1, "r", 1), MetricsError);  // offset past 65535
}

TEST(Metrics, ListenAddressesAreParsedStrictly) {
    const std::vector<std::pair<std::string, ListenAddress>> good = {
        {"127.0.0.1:9400", {"127.0.0.1", 9400}}, {"0.0.0.0:0", {"0.0.0.0", 0}},
        {"localhost:65535", {"localhost", 65535}},
        {"node-7.cluster:80", {"node-7.cluster", 80}}};
    for (const auto& [text, want] : good) {
        const ListenAddress a = parse_listen(text);
        EXPECT_EQ(a.host, want.host) << text;
        EXPECT_EQ(a.port, want.port) << text;
    }
    for (const char* bad : {"9400", ":9400", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                            "127.0.0.1:94a0", "256.0.0.1:9400", "1.2.3:9400", "a b:9400", "[::1]:9400",
                            "127.0.0.1:9400,9401", "127.0.0.1:9400s", "127.0.0.1: 9400"}) {
        try {
            parse_listen(bad);
            ADD_FAILURE() << "accepted " << bad;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
        }
    }
}

// model.moe's gauges (app/trainer_moe.cpp sets them each step): absent until set, so a dense run's
// scrape lists none; then one series per (layer, expert) and per layer, the values as set.
TEST(Metrics, MoeGaugesAreListedOnceSetWithLayerAndExpertLabels) {
    Metrics m("127.0.0.1:0", 0, "moe-run", 0);
    std::string text = http_get(m.port(), "/metrics");
    ASSERT_FALSE(text.empty());
    EXPECT_EQ(text.find("llmtrain_moe_"), std::string::npos);
    m.set_moe_aux_loss(0.0425);
    for (int l = 0; l < 2; ++l)
        for (int e = 0; e < 3; ++e) m.set_moe_expert_load(l, e, 100.0 * l + e);
    m.set_moe_load_imbalance(1, 1.5);
    m.set_moe_expert_load(0, 2, 7);  // replaces
    const auto s = samples(http_get(m.port(), "/metrics"));
    const std::string L = R"(rank="0",run="moe-run")";
    EXPECT_EQ(s.at("llmtrain_moe_aux_loss{" + L + "}"), 0.0425);
    EXPECT_EQ(s.at("llmtrain_moe_load_imbalance{layer=\"1\"," + L + "}"), 1.5);
    EXPECT_EQ(s.at("llmtrain_moe_expert_load{expert=\"2\",layer=\"0\"," + L + "}"), 7.0);
    EXPECT_EQ(s.at("llmtrain_moe_expert_load{expert=\"1\",layer=\"1\"," + L + "}"), 101.0);
    int series = 0;
    for (const auto& [k, v] : s) series += k.rfind("llmtrain_moe_expert_load{", 0) == 0;
    EXPECT_EQ(series, 6);
}
