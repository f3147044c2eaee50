// tests/app/test_run_log.cpp — log line format, duration/number formatting, append-only files.
// References: hand-computed strings for fixed inputs; files re-read after two RunLog sessions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/report/run_log.hpp"

using namespace llmtrain;
namespace fs = std::filesystem;

TEST(RunLog, FormatsMatchTheDocumentedLine) {
    StepStats s;
    s.step = 120;
    s.max_steps = 2000;
    s.loss = 4.51234f;
    s.lr = 9e-4f;
    s.grad_norm = 0.8124f;
    s.tokens_per_second = 3411.6;
    s.mfu = 0.0412;
    s.elapsed_seconds = 5 * 60 + 12;
    s.eta_seconds = 40 * 60 + 3.2;
    EXPECT_EQ(format_step_line(s),
              "step 120/2000 | loss 4.5123 | lr 9.00e-04 | norm 0.812 | 3,412 tok/s | MFU 4.1% | "
              "00:05:12 elapsed | ETA 00:40:03");
}

TEST(RunLog, DurationsAndThousands) {
    EXPECT_EQ(format_duration(0), "00:00:00");
    EXPECT_EQ(format_duration(59.6), "00:01:00");
    EXPECT_EQ(format_duration(3600 * 123 + 61), "123:01:01");
    EXPECT_EQ(format_duration(-1), "--:--:--");
    EXPECT_EQ(format_duration(1.0 / 0.0), "--:--:--");
    EXPECT_EQ(format_thousands(0), "0");
    EXPECT_EQ(format_thousands(999.4), "999");
    EXPECT_EQ(format_thousands(1000), "1,000");
    EXPECT_EQ(format_thousands(1234567), "1,234,567");
    EXPECT_EQ(format_thousands(-1234), "-1,234");
}

TEST(RunLog, AppendsAndNeverTruncates) {
    const fs::path dir = fs::path(::testing::TempDir()) / "runlog_append";
    fs::remove_all(dir);
    fs::create_directories(dir);
    {
        RunLog log(true);
        log.line("before open");  // buffered until open()
        log.open(dir.string());
        log.line("first");
        log.train_record(1, 0.1f, 1e-3f, 2.5f);
    }
    {
        RunLog log(true);
        log.open(dir.string());
        log.line("second");
        log.train_record(2, 1.0f / 3.0f, 0.0f, 1.0f);
        log.val_record(2, 7.25f);
    }
    {
        RunLog silent(false);  // other ranks write nothing
        silent.open(dir.string());
        silent.line("never");
        silent.train_record(3, 1, 1, 1);
    }
    std::ifstream f(dir / "log.txt");
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(ss.str(), "before open\nfirst\nsecond\n");
    std::ifstream t(dir / "losses.tsv");
    std::vector<std::string> lines;
    for (std::string l; std::getline(t, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), 4u);
    EXPECT_EQ(lines[0], "step\tkind\tloss\tlr\tgrad_norm");
    EXPECT_EQ(lines[1], "1\ttrain\t0.100000001\t0.00100000005\t2.5");
    EXPECT_EQ(lines[2], "2\ttrain\t0.333333343\t0\t1");
    EXPECT_EQ(lines[3], "2\tval\t7.25\t\t");
    // %.9g round-trips fp32 exactly.
    EXPECT_EQ(std::stof("0.333333343"), 1.0f / 3.0f);
}

TEST(RunLog, OpenFailureNamesTheFile) {
    RunLog log(true);
    try {
        log.open("/proc/definitely/not/here");
        FAIL() << "expected std::runtime_error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("/proc/definitely/not/here/log.txt"), std::string::npos) << e.what();
    }
}
