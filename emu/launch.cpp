// emu/launch.cpp — kernel launches: configuration checks, pointer-argument checks, kernel
// attributes (cudaFuncSetAttribute), and the execution of a launch over the worker pool.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "emu/emu.hpp"
#include "emu/errors.hpp"
#include "emu/memory.hpp"
#include "emu/pool.hpp"
#include "emu/scheduler.hpp"
#include "emu/streams.hpp"

namespace emu {
namespace {

constexpr int kDefaultDynamicSmem = 48 * 1024;  // without cudaFuncSetAttribute

/// A kernel's attributes (cudaFuncSetAttribute).
struct KernelInfo {
    int max_dynamic_smem = kDefaultDynamicSmem;
};
std::mutex g_mu;
std::unordered_map<const void*, KernelInfo> g_kernels;  // guarded by g_mu
std::atomic<uint64_t> g_launches{0};

std::string dims(dim3 d) {
    std::ostringstream s;
    s << "(" << d.x << "," << d.y << "," << d.z << ")";
    return s.str();
}

std::string launch_text(const void* kernel, dim3 grid, dim3 block, size_t smem) {
    return kernel_name(kernel) + "<<<" + dims(grid) + ", " + dims(block) + ", " + std::to_string(smem) + ">>>";
}

uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull;
    h ^= (c + (h << 6) + (h >> 2)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

/// The name of the function symbol at address `addr` in the ELF file `path` loaded at `base` (from
/// its .symtab, which also lists functions with internal linkage), or "" when it has none.
std::string elf_symbol(const char* path, uintptr_t addr, uintptr_t base) {
    std::ifstream f(path, std::ios::binary);
    Elf64_Ehdr eh{};
    if (!f.read(reinterpret_cast<char*>(&eh), sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64)
        return "";
    const uintptr_t value = eh.e_type == ET_EXEC ? addr : addr - base;  // position-dependent: absolute
    std::vector<Elf64_Shdr> sections(eh.e_shnum);
    f.seekg(static_cast<std::streamoff>(eh.e_shoff));
    if (!f.read(reinterpret_cast<char*>(sections.data()), sections.size() * sizeof(Elf64_Shdr))) return "";
    for (const Elf64_Shdr& sh : sections) {
        if (sh.sh_type != SHT_SYMTAB || sh.sh_link >= sections.size()) continue;
        std::vector<Elf64_Sym> syms(sh.sh_size / sizeof(Elf64_Sym));
        f.seekg(static_cast<std::streamoff>(sh.sh_offset));
        f.read(reinterpret_cast<char*>(syms.data()), syms.size() * sizeof(Elf64_Sym));
        const Elf64_Shdr& strtab = sections[sh.sh_link];
        for (const Elf64_Sym& sym : syms) {
            if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value != value) continue;
            std::string name;
            f.seekg(static_cast<std::streamoff>(strtab.sh_offset + sym.st_name));
            std::getline(f, name, '\0');
            return name;
        }
    }
    return "";
}

/// Runs every block of a launch; throws emu::Error with the first block's report.
void execute(const detail::LaunchSpec& spec) {
    const Order ord = order();
    const uint64_t serial = g_launches++;
    const dim3 g = spec.grid;
    const uint64_t blocks = uint64_t{g.x} * g.y * g.z;
    std::vector<uint64_t> perm;
    if (ord.block == BlockOrder::random) {
        perm.resize(blocks);
        std::iota(perm.begin(), perm.end(), uint64_t{0});
        for (uint64_t r = blocks; r > 1; --r) std::swap(perm[r - 1], perm[hash3(ord.block_seed, serial, r) % r]);
    }
    std::atomic<bool> failed{false};
    std::mutex err_mu;
    std::string first_error;
    detail::parallel_for(blocks, [&](uint64_t r) {
        if (failed.load(std::memory_order_relaxed)) return;
        const uint64_t b = perm.empty() ? r : perm[r];
        const uint3 idx{static_cast<unsigned>(b % g.x), static_cast<unsigned>((b / g.x) % g.y),
                        static_cast<unsigned>(b / (uint64_t{g.x} * g.y))};
        std::string err = detail::run_block(spec, {idx, ord.thread, hash3(ord.thread_seed, serial, b), serial});
        if (!err.empty()) {
            std::lock_guard lock(err_mu);
            if (first_error.empty()) first_error = "block " + dims(dim3(idx.x, idx.y, idx.z)) + ": " + err;
            failed = true;
        }
    });
    if (!first_error.empty())
        throw Error(launch_text(spec.kernel, spec.grid, spec.block, spec.smem) + " [" + to_string(ord) + "], " +
                    first_error);
}

}  // namespace

std::string kernel_name(const void* kernel) {
    Dl_info info{};
    std::string name;
    if (dladdr(kernel, &info)) {
        if (info.dli_sname && info.dli_saddr == kernel) name = info.dli_sname;
        else if (info.dli_fname && info.dli_fbase)  // a kernel with internal linkage: not exported
            name = elf_symbol(*info.dli_fname ? info.dli_fname : "/proc/self/exe", reinterpret_cast<uintptr_t>(kernel),
                              reinterpret_cast<uintptr_t>(info.dli_fbase));
    }
    if (name.empty()) {
        std::ostringstream s;
        s << "kernel@" << kernel;
        return s.str();
    }
    int status = 0;
    char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    if (status == 0 && d) name = d;
    std::free(d);
    return name;
}

cudaError_t check_kernel_pointer(const void* kernel, int index, const void* p) {
    if (!p || memory::find(p, true)) return cudaSuccess;
    std::ostringstream m;
    m << kernel_name(kernel) << ": argument " << index << " = " << p
      << " is not device memory: " << memory::explain_foreign(p);
    return record_error(cudaErrorIllegalAddress, m.str());
}

cudaError_t launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          std::function<void()> body) {
    EMU_RETURN_IF_STICKY();
    auto fail = [&](cudaError_t code, const std::string& why) {
        return record_error(code, launch_text(kernel, grid, block, smem) + ": " + why);
    };
    const uint64_t threads = uint64_t{block.x} * block.y * block.z;
    if (!block.x || !block.y || !block.z || !grid.x || !grid.y || !grid.z)
        return fail(cudaErrorInvalidConfiguration, "a grid or block dimension is 0");
    if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024)
        return fail(cudaErrorInvalidConfiguration, "a block has " + std::to_string(threads) +
                                                       " threads; the limits are 1024 in all, x and y <= 1024, z <= 64");
    if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        return fail(cudaErrorInvalidConfiguration, "grid too large: x < 2^31, y and z <= 65535");
    int limit = kDefaultDynamicSmem;
    {
        std::lock_guard lock(g_mu);
        if (auto it = g_kernels.find(kernel); it != g_kernels.end()) limit = it->second.max_dynamic_smem;
    }
    if (smem > static_cast<size_t>(limit))
        return fail(cudaErrorInvalidValue,
                    std::to_string(smem) + " B of dynamic shared memory exceed the kernel's limit of " +
                        std::to_string(limit) +
                        " B (raise it with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                        "bytes), at most " + std::to_string(smem_optin()) + ")");
    std::lock_guard lock(streams::lock());
    CUstream_st* s = streams::resolve(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle, "invalid stream handle (never created, or destroyed)");
    auto spec = std::make_shared<detail::LaunchSpec>(detail::LaunchSpec{kernel, grid, block, smem, std::move(body)});
    streams::push(s, [spec] { execute(*spec); }, "kernel launch");
    return cudaSuccess;
}

}  // namespace emu

extern "C" {

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::g_mu);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > emu::smem_optin())
            return emu::record_error(cudaErrorInvalidValue,
                                     "cudaFuncSetAttribute(" + emu::kernel_name(func) +
                                         ", MaxDynamicSharedMemorySize, " + std::to_string(value) +
                                         "): must be in [0, " + std::to_string(emu::smem_optin()) + "]");
        emu::g_kernels[func].max_dynamic_smem = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;  // a hint
    return emu::record_error(cudaErrorNotSupported,
                             "cudaFuncSetAttribute: attribute " + std::to_string(attr) + " is not emulated");
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::g_mu);
    *attr = cudaFuncAttributes{};
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    auto it = emu::g_kernels.find(func);
    attr->maxDynamicSharedSizeBytes = it != emu::g_kernels.end() ? it->second.max_dynamic_smem : emu::kDefaultDynamicSmem;
    return cudaSuccess;
}

}  // extern "C"
