// model/cpu/cpu_ops.hpp — the CPU backend: fp32 everywhere, OpenMP over rows/heads, OpenBLAS sgemm.
//
// It is the reference the CUDA backend is tested against and the default without a GPU. "Device"
// memory is host memory, streams and events are dummies and every op runs at once. The ops are
// spread over one file per concept (memory.cpp, encoder.cpp, layernorm.cpp, rmsnorm.cpp, matmul.cpp, matmul_fp8.cpp,
// attention.cpp, rope.cpp, gelu.cpp, swiglu.cpp, classifier.cpp, adamw.cpp, moe_layer.cpp (with
// moe.cpp); OpenBLAS setup in
// blas_setup.cpp); their
// contracts are in model/ops.hpp.
// Determinism: every reduction has a fixed order (static partitions, no atomics), so results are
// bitwise reproducible for a fixed thread count. Everything but matmul is also independent of the
// thread count; matmul's per-thread sgemm slices change size with it (matmul.cpp).
#pragma once
#include <memory>

#include "model/ops.hpp"

namespace llmtrain {

class CpuOps final : public Ops {
public:
    /// Sets OpenBLAS up once (blas_setup.hpp): one thread, since the ops call sgemm from their own
    /// OpenMP threads (matmul.cpp), and kernels that match this CPU.
    CpuOps();
    const char* name() const override { return "cpu"; }
    DType act_dtype() const override { return DType::f32; }

    // memory.cpp
    void* malloc(size_t bytes) override;
    void free(void* p) override;
    void* malloc_host(size_t bytes) override;
    void free_host(void* p) override;
    void memcpy_h2d(void* dst, const void* src, size_t bytes) override;
    void memcpy_d2h(void* dst, const void* src, size_t bytes) override;
    void memcpy_d2d(void* dst, const void* src, size_t bytes) override;
    void memset(void* p, int value, size_t bytes) override;
    void synchronize() override {}
    void mem_info(size_t* free_bytes, size_t* total_bytes) override;
    Stream create_stream() override;
    void destroy_stream(Stream s) override;
    void set_stream(Stream) override {}
    Event create_event() override;
    void destroy_event(Event e) override;
    void record_event(Event e) override;
    void wait_event(Event) override {}
    void synchronize_event(Event) override {}
    Event create_timed_event() override { return create_event(); }
    double elapsed_seconds(Event start, Event end) override;
    void cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n) override;

    // encoder.cpp
    void encoder_forward(void* out, const int* inp, const void* wte, const void* wpe, int B, int T,
                         int C) override;
    void encoder_backward(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T,
                          int C) override;
    void encoder_forward_vocab(void* out, const int* inp, const void* wte, const void* wpe, int B, int T,
                               int C, int v0, int nv) override;
    void encoder_backward_vocab(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T,
                                int C, int v0, int nv) override;
    void encoder_forward_pos(void* out, const int* inp, const int* pos, const void* wte, const void* wpe, int B,
                             int T, int C, int v0, int nv) override;
    void encoder_backward_pos(void* dwte, void* dwpe, const void* dout, const int* inp, const int* pos, int B, int T,
                              int C, int v0, int nv) override;
    // layernorm.cpp
    void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                           const void* bias, int N, int C) override;
    void fused_residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd,
                                          const void* a, const void* b, const void* weight,
                                          const void* bias, int N, int C) override;
    void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                            const void* weight, const float* mean, const float* rstd, int N,
                            int C) override;
    void residual_forward(void* out, const void* a, const void* b, size_t n) override;
    // matmul.cpp
    void matmul_forward(void* out, void* pre_gelu, const void* inp, const void* weight,
                        const void* bias, int N, int C, int OC) override;
    void matmul_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                         const void* weight, const void* pre_gelu, int N, int C, int OC) override;
    // matmul_fp8.cpp: FP8's numerics in fp32 (the CUDA backend's reference; not a speed-up)
    std::string fp8_unsupported(Fp8Recipe) const override { return ""; }
    void matmul_forward_fp8(Fp8Recipe r, void* out, const void* inp, const void* weight, const void* bias, int N,
                            int C, int OC) override;
    void matmul_backward_fp8(Fp8Recipe r, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                             const void* weight, int N, int C, int OC) override;
    // attention.cpp
    void attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C,
                           int NH) override;
    void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                            const float* lse, int B, int T, int C, int NH) override;
    void attention_forward_gqa(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                               int HS) override;
    void attention_backward_gqa(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                int B, int T, int NH, int NKV, int HS) override;
    void attention_forward_doc(void* out, float* lse, const void* qkv, const int* doc_start, int B, int T, int NH,
                               int NKV, int HS) override;
    void attention_backward_doc(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                const int* doc_start, int B, int T, int NH, int NKV, int HS) override;
    void attention_forward_rows(void* out, float* lse, const void* qkv, const int* doc_start, int B, int T, int NH,
                                int NKV, int HS, const AttentionRows& rows) override;
    void attention_backward_rows(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                 const int* doc_start, int B, int T, int NH, int NKV, int HS,
                                 const AttentionRows& rows) override;
    bool implements_attention_rows() const override { return true; }
    bool implements(OpFamily) const override { return true; }
    // rmsnorm.cpp
    void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                         float eps) override;
    void fused_residual_rmsnorm_forward(void* residual, void* out, float* rstd, const void* a, const void* b,
                                        const void* weight, int N, int C, float eps) override;
    void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                          const float* rstd, int N, int C) override;
    bool implements_qk_norm() const override { return true; }
    void qk_norm_forward(void* qkv, void* pre, float* rstd, const void* wq, const void* wk, int N, int NH, int NKV,
                         int HS, float eps) override;
    void qk_norm_backward(void* dqkv, void* dwq, void* dwk, const void* pre, const void* wq, const void* wk,
                          const float* rstd, int N, int NH, int NKV, int HS) override;
    // rope.cpp
    void rope_forward(void* qkv, int B, int T, int NH, int NKV, int HS, float theta) override;
    void rope_backward(void* dqkv, int B, int T, int NH, int NKV, int HS, float theta) override;
    void rope_forward_pos(void* qkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                          int n_pos) override;
    void rope_backward_pos(void* dqkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                           int n_pos) override;
    // moe_layer.cpp
    bool implements_moe() const override { return true; }
    bool implements_moe_aux_fractions() const override { return true; }
    float moe_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* out, const void* x,
                      const void* w_router, const void* w13, const void* w2, bool combine) override;
    void moe_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx, void* dw_router, void* dw13,
                      void* dw2, const void* dout, const void* x, const void* w_router, const void* w13,
                      const void* w2, float aux_scale) override;
    float moe_dispatch_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, const void* x,
                               const void* w_router) override;
    void moe_ffn_forward(void* yg, void* gu, void* h, const void* xg, const void* w13, const void* w2,
                         const int* offsets, int E, int C, int F) override;
    void moe_combine_forward(const MoeShape& s, const MoeActs& a, void* out, const void* yg) override;
    void moe_combine_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dyg, const void* dout,
                              const void* yg) override;
    void moe_ffn_backward(void* dxg, void* dw13, void* dw2, void* dgu, void* dh, const void* dyg, const void* xg,
                          const void* gu, const void* h, const void* w13, const void* w2, const int* offsets, int E,
                          int C, int F) override;
    void moe_dispatch_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx, void* dw_router,
                               const void* dxg, const void* x, const void* w_router, float aux_scale) override;
    // swiglu.cpp
    void swiglu_forward(void* out, const void* inp, int N, int F) override;
    void swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) override;
    // gelu.cpp
    void gelu_forward(void* out, const void* inp, size_t n) override;
    void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) override;
    // classifier.cpp
    void fused_classifier(void* logits, float* losses, const int* targets, int N, int V, int Vp,
                          float dloss, bool write_grad) override;
    void classifier_partial(float* stats, const void* logits, const int* targets, int N, int nv, int v0,
                            int V) override;
    void classifier_finish(void* logits, float* losses, const float* all, int tp, const int* targets, int N,
                           int nv, int v0, int V, float dloss, bool write_grad) override;
    // adamw.cpp
    void adamw_update(void* params, float* master, const void* grads, float* m, float* v, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale, int t, size_t index0) override;
    void norm_squared(float* out, const void* x, size_t n, bool accumulate) override;
    void scale(void* x, float s, size_t n) override;
};

/// Creates the CPU backend (memory.cpp).
std::unique_ptr<Ops> make_cpu_backend();

}  // namespace llmtrain
