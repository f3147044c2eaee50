// model/gpt_block.cpp — one transformer block, built from the pieces the architecture description
// chooses (model/arch.hpp; docs/model.md "Architectures"): the norm (LayerNorm or RMSNorm), the
// positions (rotary: q and k turned after the q|k|v matmul), the attention (NH query heads over NKV
// key/value heads; NKV = NH is plain multi-head) and the MLP (GELU or SwiGLU). The branches below
// are on those pieces, never on the architecture's name. Buffers and the TP / sequence-parallel
// helpers: model/gpt_impl.hpp.
#include <string>
#include <vector>

#include "model/gpt_impl.hpp"

namespace llmtrain {

LayerActs GPT::Impl::make_acts(MemCategory cat) {
    const size_t N = static_cast<size_t>(opt.B) * opt.T, C = cfg.n_embd;
    const size_t Rr = size_t(R);  // ln1, ln2, res2 and the norm statistics: this rank's rows
    const size_t nc = align256(Rr * C * es), nf = align256(Rr * 4), nct = align256(N * size_t(Ct) * es);
    const size_t nqkv = align256(N * size_t(Qt) * es), npre = align256(N * size_t(Mt) * es);
    const size_t nfch = align256(N * size_t(Ft) * es);
    const size_t nlse = align256(static_cast<size_t>(opt.B) * NHt * opt.T * 4);
    const size_t nqk = spec.qk_norm ? align256(N * size_t(NHt + NKVt) * spec.HS * es) : 0;  // q|k before the norm
    const size_t nqkr = spec.qk_norm ? align256(N * size_t(NHt + NKVt) * 4) : 0;
    const bool ln = spec.norm == NormKind::layernorm;  // RMSNorm keeps no mean
    const size_t nstats = (ln ? 4 : 2) * nf;
    const size_t total = 3 * nc + nct + nqkv + npre + nfch + nstats + nlse + nqk + nqkr;
    char* p = static_cast<char*>(get(cat, total));
    auto take = [&](size_t bytes) { char* q = p; p += bytes; return q; };
    LayerActs a;
    a.ln1 = take(nc);
    if (ln) a.ln1_mean = reinterpret_cast<float*>(take(nf));
    a.ln1_rstd = reinterpret_cast<float*>(take(nf));
    a.qkv = take(nqkv);
    if (spec.qk_norm) a.qk_pre = take(nqk), a.qk_rstd = reinterpret_cast<float*>(take(nqkr));
    a.atty = take(nct);
    a.att_lse = reinterpret_cast<float*>(take(nlse));
    a.res2 = take(nc);
    a.ln2 = take(nc);
    if (ln) a.ln2_mean = reinterpret_cast<float*>(take(nf));
    a.ln2_rstd = reinterpret_cast<float*>(take(nf));
    a.fch_pre = take(npre);
    a.fch = take(nfch);
    if (spec.moe()) a.moe = make_moe_acts(cat), a.moe_ep = make_moe_ep_acts(cat);  // gpt_moe.cpp, gpt_moe_ep.cpp
    return a;
}

void GPT::Impl::norm_forward(void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                             int rows) {
    if (spec.norm == NormKind::layernorm) ops.layernorm_forward(out, mean, rstd, x, w, b, rows, cfg.n_embd);
    else ops.rmsnorm_forward(out, rstd, x, w, rows, cfg.n_embd, spec.norm_eps);
}

void GPT::Impl::residual_norm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                      const void* b, const void* w, const void* bias, int rows) {
    if (spec.norm == NormKind::layernorm)
        ops.fused_residual_layernorm_forward(residual, out, mean, rstd, a, b, w, bias, rows, cfg.n_embd);
    else
        ops.fused_residual_rmsnorm_forward(residual, out, rstd, a, b, w, rows, cfg.n_embd, spec.norm_eps);
}

void GPT::Impl::norm_backward(void* dx, void* dw, void* db, const void* dout, const void* x, const void* w,
                              const float* mean, const float* rstd, int rows) {
    if (spec.norm == NormKind::layernorm) ops.layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, rows, cfg.n_embd);
    else ops.rmsnorm_backward(dx, dw, dout, x, w, rstd, rows, cfg.n_embd);
}

void GPT::Impl::linear_forward(void* out, void* pre_gelu, const void* inp, const void* w, const void* b, int N, int C,
                               int OC) {
    if (opt.fp8 == Fp8Recipe::off) return ops.matmul_forward(out, pre_gelu, inp, w, b, N, C, OC);
    ops.matmul_forward_fp8(opt.fp8, pre_gelu != nullptr ? pre_gelu : out, inp, w, b, N, C, OC);
    if (pre_gelu != nullptr) ops.gelu_forward(out, pre_gelu, static_cast<size_t>(N) * OC);
}

void GPT::Impl::linear_backward(void* dinp, void* dw, void* db, const void* dout, const void* inp, const void* w,
                                const void* pre_gelu, int N, int C, int OC) {
    if (opt.fp8 == Fp8Recipe::off) return ops.matmul_backward(dinp, dw, db, dout, inp, w, pre_gelu, N, C, OC);
    ops.matmul_backward_fp8(opt.fp8, dinp, dw, db, dout, inp, w, N, C, OC);
    if (pre_gelu != nullptr) ops.gelu_backward(dinp, pre_gelu, dinp, static_cast<size_t>(N) * C);  // elementwise: in place
}

/// With tp > 1, the row-parallel matmuls' partial sums are all-reduced (their replicated bias, if
/// any, added on TP rank 0 only, so it is counted once); recomputation repeats the first
/// all-reduce. With sp the norms and residual adds run on this rank's R rows: ln1 and ln2 are
/// all-gathered before the column-parallel matmuls and the partial sums reduce-scattered.
void GPT::Impl::layer_forward(Context& c, int i, const void* w, const LayerActs& a, bool write_out) {
    const int B = opt.B, T = opt.T, C = cfg.n_embd, N = B * T, HS = spec.HS;
    const LayerParams& p = lp[i];
    auto P = [&](size_t off) { return this->P(w, off); };
    const bool bias_here = tp_rank == 0;
    const void* x = c.res[i];
    norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(p.ln1w), P(p.ln1b), R);
    linear_forward(a.qkv, nullptr, gather_rows(a.ln1), P(p.qkvw), P(p.qkvb), N, C, Qt);  // column-parallel
    if (spec.qk_norm)  // Qwen3: each q and k head RMS-normalized before the rotation
        ops.qk_norm_forward(a.qkv, a.qk_pre, a.qk_rstd, P(p.qnorm), P(p.knorm), N, NHt, NKVt, HS, spec.norm_eps);
    if (spec.pos == PosKind::rotary) ops.rope_forward_pos(a.qkv, c.pos, B, T, NHt, NKVt, HS, spec.rope_theta, Tw);
    if (cpg != nullptr) cp_attention_forward(c, a);  // this rank's rows against the whole window (gpt_cp.cpp)
    else ops.attention_forward_doc(a.atty, a.att_lse, a.qkv, c.doc_start, B, T, NHt, NKVt, HS);  // local heads
    linear_forward(tmp, nullptr, a.atty, P(p.attprojw), bias_here ? P(p.attprojb) : nullptr, N, Ct, C);
    const void* att = sum_rows(tmp, gath);  // row-parallel: sum of the partial products
    residual_norm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, att, P(p.ln2w), P(p.ln2b), R);
    if (spec.moe()) return moe_mlp_forward(c, i, w, a, write_out);  // routed (+ shared) experts (gpt_moe.cpp)
    if (spec.mlp == MlpKind::gelu) {
        linear_forward(a.fch, a.fch_pre, gather_rows(a.ln2), P(p.fcw), P(p.fcb), N, C, Ft);  // column-parallel
    } else {  // [gate | up] in one matmul (the two tensors are packed), then silu(gate) * up
        linear_forward(a.fch_pre, nullptr, gather_rows(a.ln2), P(p.fcw), nullptr, N, C, Mt);
        ops.swiglu_forward(a.fch, a.fch_pre, N, Ft);
    }
    if (!write_out) return;  // recomputation needs only the layer's internals
    linear_forward(tmp, nullptr, a.fch, P(p.fcprojw), bias_here ? P(p.fcprojb) : nullptr, N, Ft, C);
    const void* mlp = sum_rows(tmp, gath);
    ops.residual_forward(c.res[i + 1], a.res2, mlp, static_cast<size_t>(R) * C);
}

/// With tp > 1 the gradients of the column-parallel matmuls' (replicated) inputs ln2 and ln1 are
/// partial sums over the local columns: all-reduced. The replicated biases' gradients are whole on
/// every rank (dres is). With sp, dres is (R,C): all-gathered before each row-parallel matmul's
/// backward (the conjugate of its forward reduce-scatter), ln2 / ln1 all-gathered again for the
/// weight gradients, the column-parallel input gradients reduce-scattered to this rank's rows, and
/// the norm gradients of the R rows summed over the group (add_ln_grads). The row-parallel biases'
/// gradients come from the gathered, whole output gradient: no sum needed.
void GPT::Impl::layer_backward(Context& c, int i, const void* w, void* g, const LayerActs& a) {
    const int B = opt.B, T = opt.T, C = cfg.n_embd, N = B * T, HS = spec.HS;
    const LayerParams& p = lp[i];
    auto P = [&](size_t off) { return this->P(w, off); };
    auto G = [&](size_t off) { return this->G(g, off); };
    const int k2 = norm_slots();  // lng slot of the second norm's weight
    // MLP branch: out = res2 + proj(act(fc(ln2))); dbuf_4c = d fch_pre (N,Mt)
    const void* dln2 = nullptr;
    if (spec.moe()) {
        dln2 = moe_mlp_backward(c, i, w, g, a);  // d ln2, this rank's rows, summed where split (gpt_moe.cpp)
    } else if (spec.mlp == MlpKind::gelu) {
        linear_backward(dbuf_4c, G(p.fcprojw), G(p.fcprojb), gather_rows(dres), a.fch, P(p.fcprojw), a.fch_pre,
                            N, Ft, C);  // GELU backward fused
    } else {
        linear_backward(dbuf_f, G(p.fcprojw), G(p.fcprojb), gather_rows(dres), a.fch, P(p.fcprojw), nullptr, N,
                            Ft, C);  // dbuf_f = d fch (N,Ft)
        ops.swiglu_backward(dbuf_4c, dbuf_f, a.fch_pre, N, Ft);
    }
    if (!spec.moe()) {
        linear_backward(dbuf_c, G(p.fcw), G(p.fcb), dbuf_4c, gather_rows(a.ln2), P(p.fcw), nullptr, N, C, Mt);
        dln2 = sum_rows(dbuf_c, tmp);
    }
    norm_backward(dres, ln_grad(g, p.ln2w, k2), ln_grad(g, p.ln2b, k2 + 1), dln2, a.res2, P(p.ln2w), a.ln2_mean,
                  a.ln2_rstd, R);  // dres = d res2
    // attention branch: res2 = x + proj(attention(positions(qkv(ln1))))
    linear_backward(dbuf_c, G(p.attprojw), G(p.attprojb), gather_rows(dres), a.atty, P(p.attprojw), nullptr, N,
                        Ct, C);  // dbuf_c = d atty (N,Ct)
    if (cpg != nullptr) cp_attention_backward(c, i, a);  // d qkv (N,Qt), summed over the CP group (gpt_cp.cpp)
    else ops.attention_backward_doc(dbuf_4c, dbuf_c, a.qkv, a.atty, a.att_lse, c.doc_start, B, T, NHt, NKVt,
                                    HS);  // d qkv (N,Qt)
    if (spec.pos == PosKind::rotary) ops.rope_backward_pos(dbuf_4c, c.pos, B, T, NHt, NKVt, HS, spec.rope_theta, Tw);
    if (spec.qk_norm)  // d q|k before their norm, in place; the weights' gradients (whole rows: no sp sum)
        ops.qk_norm_backward(dbuf_4c, G(p.qnorm), G(p.knorm), a.qk_pre, P(p.qnorm), P(p.knorm), a.qk_rstd, N, NHt,
                             NKVt, HS);
    linear_backward(dbuf_c, G(p.qkvw), G(p.qkvb), dbuf_4c, gather_rows(a.ln1), P(p.qkvw), nullptr, N, C,
                        Qt);  // dbuf_c = d ln1 (partial sums over the local heads)
    const void* dln1 = sum_rows(dbuf_c, tmp);
    norm_backward(dres, ln_grad(g, p.ln1w, 0), ln_grad(g, p.ln1b, 1), dln1, c.res[i], P(p.ln1w), a.ln1_mean,
                  a.ln1_rstd, R);  // dres = d x
    add_ln_grads(g, {p.ln1w, p.ln1b, p.ln2w, p.ln2b});
}

}  // namespace llmtrain
