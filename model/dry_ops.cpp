// model/dry_ops.cpp — the counting backend (see dry_ops.hpp).
#include "model/dry_ops.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace llmtrain {

namespace {

[[noreturn]] void no_compute(const char* op) {
    throw std::logic_error(std::string("dry-run backend: ") + op + " computes, and a dry run only counts memory");
}

class DryOps final : public Ops {
public:
    explicit DryOps(DType t) : t_(t) {}
    const char* name() const override { return "dry-run"; }
    DType act_dtype() const override { return t_; }
    bool implements(OpFamily) const override { return true; }  // it counts every architecture's memory
    bool implements_attention_rows() const override { return true; }
    bool implements_moe() const override { return true; }  // counts MoE's buffers
    bool implements_moe_aux_fractions() const override { return true; }
    bool implements_qk_norm() const override { return true; }  // counts QK-norm's buffers
    std::string fp8_unsupported(Fp8Recipe) const override { return ""; }  // the device is checked where it runs

    void* malloc(size_t bytes) override {
        const uintptr_t p = next_;
        next_ += (bytes + 255) / 256 * 256 + 256;  // distinct, aligned, never dereferenced
        return reinterpret_cast<void*>(p);
    }
    void free(void*) override {}
    void* malloc_host(size_t bytes) override { return malloc(bytes); }
    void free_host(void*) override {}
    void memcpy_h2d(void*, const void*, size_t) override { no_compute("memcpy_h2d"); }
    void memcpy_d2h(void*, const void*, size_t) override { no_compute("memcpy_d2h"); }
    void memcpy_d2d(void*, const void*, size_t) override { no_compute("memcpy_d2d"); }
    void memset(void*, int, size_t) override {}  // buffers are zeroed at construction: nothing to do
    void synchronize() override {}
    void mem_info(size_t* free_bytes, size_t* total_bytes) override { *free_bytes = *total_bytes = 0; }

    Stream create_stream() override { return nullptr; }
    void destroy_stream(Stream) override {}
    void set_stream(Stream) override {}
    Event create_event() override { return nullptr; }
    void destroy_event(Event) override {}
    void record_event(Event) override {}
    void wait_event(Event) override {}
    void synchronize_event(Event) override {}
    Event create_timed_event() override { return nullptr; }
    double elapsed_seconds(Event, Event) override { return 0.0; }

    void cast(void*, DType, const void*, DType, size_t) override { no_compute("cast"); }
    void encoder_forward(void*, const int*, const void*, const void*, int, int, int) override { no_compute("encoder"); }
    void encoder_backward(void*, void*, const void*, const int*, int, int, int) override { no_compute("encoder"); }
    void encoder_forward_vocab(void*, const int*, const void*, const void*, int, int, int, int, int) override {
        no_compute("encoder");
    }
    void encoder_backward_vocab(void*, void*, const void*, const int*, int, int, int, int, int) override {
        no_compute("encoder");
    }
    void layernorm_forward(void*, float*, float*, const void*, const void*, const void*, int, int) override {
        no_compute("layernorm");
    }
    void fused_residual_layernorm_forward(void*, void*, float*, float*, const void*, const void*, const void*,
                                          const void*, int, int) override {
        no_compute("layernorm");
    }
    void layernorm_backward(void*, void*, void*, const void*, const void*, const void*, const float*, const float*,
                            int, int) override {
        no_compute("layernorm");
    }
    void residual_forward(void*, const void*, const void*, size_t) override { no_compute("residual"); }
    void matmul_forward(void*, void*, const void*, const void*, const void*, int, int, int) override {
        no_compute("matmul");
    }
    void matmul_backward(void*, void*, void*, const void*, const void*, const void*, const void*, int, int,
                         int) override {
        no_compute("matmul");
    }
    void attention_forward(void*, float*, const void*, int, int, int, int) override { no_compute("attention"); }
    void attention_backward(void*, const void*, const void*, const void*, const float*, int, int, int, int) override {
        no_compute("attention");
    }
    void gelu_forward(void*, const void*, size_t) override { no_compute("gelu"); }
    void gelu_backward(void*, const void*, const void*, size_t) override { no_compute("gelu"); }
    void fused_classifier(void*, float*, const int*, int, int, int, float, bool) override { no_compute("classifier"); }
    void classifier_partial(float*, const void*, const int*, int, int, int, int) override { no_compute("classifier"); }
    void classifier_finish(void*, float*, const float*, int, const int*, int, int, int, int, float, bool) override {
        no_compute("classifier");
    }
    void adamw_update(void*, float*, const void*, float*, float*, size_t, float, float, float, float, float, float,
                      int, size_t) override {
        no_compute("adamw");
    }
    void norm_squared(float*, const void*, size_t, bool) override { no_compute("norm"); }
    void scale(void*, float, size_t) override { no_compute("scale"); }

private:
    DType t_;
    uintptr_t next_ = uintptr_t(1) << 40;
};

}  // namespace

std::unique_ptr<Ops> make_dry_ops(DType act_dtype) { return std::make_unique<DryOps>(act_dtype); }

}  // namespace llmtrain
