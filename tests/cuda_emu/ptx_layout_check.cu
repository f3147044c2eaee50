// tests/cuda_emu/ptx_layout_check.cu — model/cuda/ptx.cuh's layouts and cp.async semantics checked
// by one program that builds both ways: under the emulator (ctest cuda_emu.ptx_layout_check) and
// with nvcc on a real GPU, so the emulator's model is held to what the hardware does:
//   nvcc -std=c++20 -I. -arch=sm_90 tests/cuda_emu/ptx_layout_check.cu -o ptx_layout_check && ./ptx_layout_check
// Checks (the kernels of tests/cuda_emu/kernels/ptx_kernels.cuh):
//   - mma with hand-built fragments (PTX ISA layout) vs a double matmul: |d - ref| <= 1e-5 |ref| + 1e-5
//     (the GPU's order of sums is its own; products of bf16 are exact);
//   - every ldmatrix form vs the documented mapping: exact;
//   - cp.async -> ldmatrix -> mma, a 16x16x16 product, vs double: same tolerance;
//   - cp.async data after the waits (wait_group 1 then 0 over two groups, valid = false zeros): exact;
//   - pack_bf16x2 on the device: exact bits;
//   - ex2_approx vs double exp2 within PTX's 2^-22 relative, its flushes exact (ex2_mismatches).
// Prints one line per check and "ptx_layout_check: PASS"; exit status 1 on any failure.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "tests/cuda_emu/kernels/ptx_kernels.cuh"

using namespace ptx_kernels;

namespace {

template <class T>
struct Buf {
    T* p = nullptr;
    size_t n;
    explicit Buf(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
    explicit Buf(const std::vector<T>& v) : Buf(v.size()) {
        CUDA_CHECK(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    ~Buf() { cudaFree(p); }
    std::vector<T> get() const {
        std::vector<T> v(n);
        CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }
};

__global__ void pack_kernel(uint32_t* out) {
    out[0] = ptx::pack_bf16x2(1.0f, -2.0f);
    out[1] = ptx::pack_bf16x2(1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f);
    out[2] = ptx::pack_bf16x2(1.0f + 0x1.8p-8f, 0.0f);
}

int failures = 0;

void report(const char* what, int bad, const char* detail = "") {
    std::printf("ptx_layout_check: %-44s %s%s\n", what, bad ? "FAIL " : "ok", detail);
    failures += bad != 0;
}

std::vector<uint16_t> random_bf16_bits(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<uint16_t> v(n);
    for (auto& x : v) {
        const float f = u(rng);
        uint32_t b;
        std::memcpy(&b, &f, 4);
        x = static_cast<uint16_t>(b >> 16);  // truncation: any bf16 will do
    }
    return v;
}

double bf(uint16_t bits) {
    const uint32_t u = uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

bool close(double got, double ref) { return std::abs(got - ref) <= 1e-5 * std::abs(ref) + 1e-5; }

void check_mma() {
    const auto A = random_bf16_bits(2 * 256, 1), B = random_bf16_bits(2 * 128, 2);
    std::vector<float> C(2 * 128);
    for (int i = 0; i < 256; i++) C[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
    Buf<uint16_t> da(A), db(B);
    Buf<float> dc(C), dd(2 * 128);
    llmtrain::launch(mma_by_hand, 1, 64, 0, nullptr, dd.p, da.p, db.p, dc.p);
    const auto D = dd.get();
    int bad = 0;
    for (int w = 0; w < 2; w++)
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) {
                double ref = C[128 * w + r * 8 + n];
                for (int k = 0; k < 16; k++) ref += bf(A[256 * w + r * 16 + k]) * bf(B[128 * w + k * 8 + n]);
                bad += !close(D[128 * w + r * 8 + n], ref);
            }
    report("mma m16n8k16 hand-built fragments", bad);
}

void check_ldmatrix() {
    std::vector<uint16_t> src(256);
    for (int i = 0; i < 256; i++) src[i] = static_cast<uint16_t>(0x1000 + i);
    Buf<uint16_t> dsrc(src);
    Buf<uint32_t> dout(128);
    for (int op : {1, 2, 4, 12, 14}) {
        llmtrain::launch(ldmatrix_kernel, 1, 32, 0, nullptr, dout.p, dsrc.p, op);
        const auto out = dout.get();
        const int num = op % 10;
        int bad = 0;
        for (int lane = 0; lane < 32; lane++)
            for (int j = 0; j < num; j++) {
                auto M = [&](int r, int c) { return uint32_t{src[j * 64 + r * 8 + c]}; };
                const int g = lane / 4, c = 2 * (lane % 4);
                const uint32_t want = op > 10 ? M(c, g) | M(c + 1, g) << 16 : M(g, c) | M(g, c + 1) << 16;
                bad += out[lane * 4 + j] != want;
            }
        char what[64];
        std::snprintf(what, sizeof what, "ldmatrix x%d%s", num, op > 10 ? ".trans" : "");
        report(what, bad);
    }
}

void check_composed() {
    const auto A = random_bf16_bits(256, 11), B = random_bf16_bits(256, 12);
    Buf<uint16_t> da(A), db(B);
    Buf<float> dd(256);
    llmtrain::launch(composed_kernel, 1, 32, 1024, nullptr, dd.p, da.p, db.p);
    const auto D = dd.get();
    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            double ref = 0;
            for (int k = 0; k < 16; k++) ref += bf(A[r * 16 + k]) * bf(B[k * 16 + n]);
            bad += !close(D[r * 16 + n], ref);
        }
    report("cp.async + ldmatrix x4/x4.trans + mma", bad);
}

void check_cp_async() {
    std::vector<float> src(2 * 64 * 4);
    for (size_t i = 0; i < src.size(); i++) src[i] = static_cast<float>(i) + 0.5f;
    Buf<float> dsrc(src), dout(3 * 64 * 4);
    llmtrain::launch(cp_async_kernel, 1, 64, 0, nullptr, dout.p, dsrc.p, 1);
    auto out = dout.get();
    int bad = 0;
    for (int i = 0; i < 64 * 4; i++) bad += out[i] != src[i] || out[2 * 64 * 4 + i] != src[64 * 4 + i];
    report("cp.async wait_group 1, then 0", bad);
    llmtrain::launch(cp_async_kernel, 1, 64, 0, nullptr, dout.p, dsrc.p, 2);
    out = dout.get();
    bad = 0;
    for (int i = 0; i < 64 * 4; i++) bad += out[i] != 0.0f || std::signbit(out[i]);
    report("cp.async valid=false writes zeros", bad);
}

void check_pack() {
    Buf<uint32_t> d(3);
    llmtrain::launch(pack_kernel, 1, 1, 0, nullptr, d.p);
    const auto o = d.get();
    report("pack_bf16x2 round to nearest even", !(o[0] == 0xC0003F80u && o[1] == 0x3F823F80u && o[2] == 0x00003F81u));
}

void check_ex2() {
    const std::vector<float> x = ex2_inputs();
    Buf<float> in(x), out(x.size());
    llmtrain::launch(ex2_kernel, (static_cast<int>(x.size()) + 127) / 128, 128, 0, nullptr, out.p, in.p,
                     static_cast<int>(x.size()));
    report("ex2.approx.ftz within 2^-22, flushes", ex2_mismatches(x, out.get()));
}

}  // namespace

int main() {
    try {
        check_mma();
        check_ldmatrix();
        check_composed();
        check_cp_async();
        check_pack();
        check_ex2();
    } catch (const std::exception& e) {
        std::printf("ptx_layout_check: error: %s\n", e.what());
        return 1;
    }
    std::printf("ptx_layout_check: %s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
