// tests/app/shell_util.hpp — a shell command's exit status and output, for the tests that run
// llmtrain or llmtrain-plan through the shell and read what they print (test_traffic.cpp,
// test_plan_cp.cpp).
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace shell {

struct Result {
    int code = -1;    ///< the exit status; -1 when the shell did not start or did not exit
    std::string out;  ///< stdout and stderr together, in the order written
};

/// Runs `cmd` under /bin/sh with stderr joined to stdout.
inline Result sh(const std::string& cmd) {
    Result p;
    FILE* f = popen((cmd + " 2>&1").c_str(), "r");
    if (!f) return p;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) p.out.append(buf.data(), n);
    const int st = pclose(f);
    p.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return p;
}

}  // namespace shell
