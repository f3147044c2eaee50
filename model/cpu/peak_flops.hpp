// model/cpu/peak_flops.hpp — the CPU backend's theoretical peak, the default denominator of MFU.
#pragma once

namespace llmtrain::cpu {

/// Theoretical fp32 peak of the CPU backend in FLOP/s: OpenMP threads x clock x FLOP per cycle and
/// core, where a core retires two FMAs per cycle on its widest vectors (64 FLOP with AVX-512, 32 with
/// AVX2 + FMA, 8 with SSE). The clock is cpufreq's maximum (turbo included) where the kernel
/// exposes it, else /proc/cpuinfo's "cpu MHz" (a VM's nominal clock), else 2.0 GHz. A CPU with one
/// AVX-512 FMA unit peaks at half this, so MFU then reads low, never above 100%. Never throws.
double peak_flops();

}  // namespace llmtrain::cpu
