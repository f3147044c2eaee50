// tests/model/test_trace.cpp — the Chrome trace-event writer: its output read back by an independent
// JSON parser (Python's json module), with every span, track name and time (µs) where it belongs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "model/trace.hpp"

namespace llmtrain {
namespace {

TEST(Trace, PythonsJsonParserReadsBackEverySpan) {
    const std::string path = testing::TempDir() + "trace_test.json", out = path + ".check";
    write_chrome_trace(path, "rank \"0\"", 3,
                       {{"d2h 0", "copies", 0.0, 0.5e-3, "\"chunk\": 0"},
                        {"adam 0", "host", 0.25e-3, 1e-3, ""},
                        {"h2d 0", "copies", 1.5e-3, 0.25e-3, "\"chunk\": 0"}});
    const std::string py =
        "import json,sys; t=json.load(open(sys.argv[1]))['traceEvents']; "
        "x=[e for e in t if e['ph']=='X']; m={e['tid']:e['args']['name'] for e in t if e['name']=='thread_name'}; "
        "p=[e['args']['name'] for e in t if e['name']=='process_name']; "
        "print(len(x), p[0], '|'.join(f\"{e['name']}@{m[e['tid']]}:{e['ts']:.1f}+{e['dur']:.1f}:{e['pid']}:{e['args'].get('chunk','-')}\" for e in x))";
    std::string quoted;  // the program inside the shell's double quotes: escape its own double quotes
    for (char c : py) quoted += c == '"' ? std::string("\\\"") : std::string(1, c);
    const std::string cmd = "/usr/bin/python3 -c \"" + quoted + "\" " + path + " > " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out);
    std::string line;
    std::getline(f, line);
    EXPECT_EQ(line, "3 rank \"0\" d2h 0@copies:0.0+500.0:3:0|adam 0@host:250.0+1000.0:3:-|h2d 0@copies:1500.0+250.0:3:0");
    std::remove(path.c_str());
    std::remove(out.c_str());
}

TEST(Trace, AnUnwritablePathIsAnError) {
    EXPECT_THROW(write_chrome_trace("/nonexistent-dir/x.json", "p", 0, {}), std::runtime_error);
}

}  // namespace
}  // namespace llmtrain
