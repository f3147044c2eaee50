// model/cpu/peak_flops.cpp — theoretical fp32 peak of the CPU backend (see peak_flops.hpp): what
// "MFU" divides by on the CPU, as 989 TFLOP/s (dense bf16) is on an H100.
#include "model/cpu/peak_flops.hpp"

#include <omp.h>

#include <fstream>
#include <string>

namespace llmtrain::cpu {
namespace {

/// The highest clock of CPU 0 in Hz: cpufreq's cpuinfo_max_freq (turbo included) where the kernel
/// has cpufreq (bare metal), else the first "cpu MHz" of /proc/cpuinfo (on a VM, the nominal clock;
/// on bare metal that line is the momentary clock), 0 when neither can be read.
double max_clock_hz() {
    std::ifstream freq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    double khz = 0;
    if (freq >> khz && khz > 0) return khz * 1e3;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("cpu MHz", 0) != 0) continue;
        const auto colon = line.find(':');
        if (colon == std::string::npos) return 0.0;
        try {
            return std::stod(line.substr(colon + 1)) * 1e6;
        } catch (const std::exception&) {
            return 0.0;
        }
    }
    return 0.0;
}

}  // namespace

double peak_flops() {
    // Two FMA ports x (vector width in floats) x 2 FLOP per FMA.
    const double flop_per_cycle = __builtin_cpu_supports("avx512f")                                   ? 64.0
                                  : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 32.0
                                                                                                      : 8.0;
    const double hz = max_clock_hz();
    return omp_get_max_threads() * (hz > 0 ? hz : 2.0e9) * flop_per_cycle;
}

}  // namespace llmtrain::cpu
