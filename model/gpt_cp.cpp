// model/gpt_cp.cpp — context parallelism inside the GPT (GPTOptions::cp; docs/parallelism.md
// "Context parallelism"): the cp ranks of a group hold the same (B,Tw) windows and each runs the
// whole model on its Tl = Tw/cp rows of every window. Everything but attention is per token, so
// only attention talks: each layer all-gathers the group's q|k|v, each rank computes its own query
// rows against the whole window, and in backward the window's d q|k|v is summed back to the rows'
// owners (reduce-scatter). This is the Llama 3 paper's all-gather scheme (Dubey et al. 2024,
// §3.3.2), not a ring: K/V are small beside Q with grouped-query attention, one collective per
// layer is simpler than a ring's cp steps, and any mask (document masking included) is the plain
// attention over the gathered window. Load balance for the causal mask (as Megatron-LM and the
// Llama 3 paper): the window is cut into 2cp chunks and rank i holds chunks i and 2cp-1-i, so every
// rank's queries see the same number of keys.
#include <array>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "model/gpt_impl.hpp"

namespace llmtrain {

int GPT::Impl::cp_window_row(int t, int r) const {
    const int half = opt.T / 2;  // rows per chunk
    if (r < 0) r = cp_rank;
    return t < half ? r * half + t : (2 * ncp - 1 - r) * half + (t - half);
}

void GPT::Impl::take_rows(const int* window, int* rows) const {
    const size_t Tl = size_t(opt.T);
    for (size_t b = 0; b < size_t(opt.B); ++b)
        for (size_t t = 0; t < Tl; ++t)
            rows[b * Tl + t] = window[b * size_t(Tw) + size_t(cpg != nullptr ? cp_window_row(int(t)) : int(t))];
}

int GPT::Impl::cp_local_row(int w) const {
    const int half = opt.T / 2, chunk = w / half;
    if (chunk == cp_rank) return w - chunk * half;
    if (chunk == 2 * ncp - 1 - cp_rank) return half + (w - chunk * half);
    return -1;
}

std::array<uint64_t, 4> GPT::cp_prefetches() const {
    const Impl& m = *impl_;
    return {m.cp_layers, m.cp_prefetched, m.cp_ready, m.cp_kept};
}

void GPT::window_losses(float* out) {
    Impl& m = *impl_;
    if (!m.last) throw std::logic_error("GPT::window_losses: only the last stage has losses");
    const size_t N = m.n_rows();
    if (m.cpg == nullptr) {
        m.ops.memcpy_d2h(out, m.ctxs[0].losses, N * 4);
        m.ops.synchronize();
        return;
    }
    // cp_stage ((cp,B,Tl,Qt) act elements, free between layers) holds the (cp,B,Tl) fp32 gather.
    m.cpg->all_gather(m.cp_stage, m.ctxs[0].losses, N, DType::f32);
    std::vector<float> all(N * size_t(m.ncp));
    m.ops.memcpy_d2h(all.data(), m.cp_stage, all.size() * 4);
    m.ops.synchronize();
    const int B = m.opt.B, Tl = m.opt.T;
    for (int r = 0; r < m.ncp; ++r)
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < Tl; ++t)
                out[static_cast<size_t>(b) * m.Tw + m.cp_window_row(t, r)] =
                    all[(static_cast<size_t>(r) * B + b) * Tl + t];
}

const int* GPT::Impl::cp_take(Context& c, const int* inputs, const int* targets) {
    const size_t N = n_rows();
    cp_host.resize(2 * N);
    int* in = cp_host.data();
    int* tg = in + N;
    take_rows(inputs, in);
    if (targets != nullptr) take_rows(targets, tg);
    ops.memcpy_h2d(tok_dev, in, N * 4);  // pageable sources: staged at the call
    if (targets != nullptr) ops.memcpy_h2d(tgt_dev, tg, N * 4);
    // Documents come from the whole window (a document may start on another rank's chunk).
    if (opt.doc_mask || opt.doc_positions) window_documents(c, inputs);
    return in;
}

void GPT::Impl::cp_permute(void* window, void* stage, bool to_window) {
    const int B = opt.B, Tl = opt.T, half = Tl / 2;
    const size_t row = static_cast<size_t>(Qt) * es, bytes = half * row;  // one chunk of one batch row
    for (int r = 0; r < ncp; ++r)
        for (int k = 0; k < 2; ++k) {
            const int chunk = k == 0 ? r : 2 * ncp - 1 - r;
            for (int b = 0; b < B; ++b) {
                char* w = static_cast<char*>(window) + (static_cast<size_t>(b) * Tw + size_t(chunk) * half) * row;
                char* s = static_cast<char*>(stage) + ((static_cast<size_t>(r) * B + b) * Tl + size_t(k) * half) * row;
                if (to_window) ops.memcpy_d2d(w, s, bytes);
                else ops.memcpy_d2d(s, w, bytes);
            }
        }
}

void GPT::Impl::cp_attention_forward(Context& c, const LayerActs& a) {
    const int B = opt.B, Tl = opt.T, half = Tl / 2;
    cpg->all_gather(cp_stage, a.qkv, n_rows() * size_t(Qt), ops.act_dtype());
    cp_permute(cp_full, cp_stage, true);
    cp_full_of = a.qkv;  // the backward right after a recomputation finds the window still here
    for (int k = 0; k < 2; ++k) {  // local rows [k*half, (k+1)*half) are window chunk `chunk`
        const int chunk = k == 0 ? cp_rank : 2 * ncp - 1 - cp_rank;
        ops.attention_forward_rows(a.atty, a.att_lse, cp_full, c.doc_start, B, Tw, NHt, NKVt, spec.HS,
                                   AttentionRows{chunk * half, half, Tl, k * half});
    }
}

void GPT::Impl::cp_attention_backward(Context& c, int i, const LayerActs& a) {
    const int B = opt.B, Tl = opt.T, half = Tl / 2;
    const size_t n = n_rows() * size_t(Qt);
    const DType dt = ops.act_dtype();
    ++cp_layers;
    if (cp_next != nullptr && cp_next_layer != i) cp_next.reset();  // (never: a prefetch is for the next layer down)
    // This layer's window of q|k|v (not kept from the forward: memory stays Tl per layer). Still in
    // cp_full when this layer's forward was the last to fill it: a recomputed layer, whose forward
    // just ran again, or the top layer right after the forward. Else gathered into cp_stage: by the
    // gather the layer above started, or now.
    if (cp_next != nullptr && cp_next_layer == i) {
        cp_ready += cp_next->test() ? 1 : 0;  // complete already: it ran beside the compute since
        cp_next->wait();
        cp_next.reset();
        cp_permute(cp_full, cp_stage, true);
    } else if (cp_full_of == a.qkv) {
        ++cp_kept;
    } else {
        cpg->all_gather(cp_stage, a.qkv, n, dt);
        cp_permute(cp_full, cp_stage, true);
    }
    // cp_stage is free now: layer i-1's gather runs beside this layer's attention backward and the
    // rest of its backward, and layer i-1's MLP backward. Not for a recomputed layer (its q|k|v do
    // not exist yet; those are the range's first n_ckpt layers, so the prefetch chain just stops).
    if (i - 1 >= n_ckpt) {
        cp_next = cpg->all_gather_start(cp_stage, c.acts[size_t(i - 1)].qkv, n, dt);
        cp_next_layer = i - 1;
        ++cp_prefetched;
    }
    ops.memset(cp_dfull, 0, n * ncp * es);
    for (int k = 0; k < 2; ++k) {
        const int chunk = k == 0 ? cp_rank : 2 * ncp - 1 - cp_rank;
        ops.attention_backward_rows(cp_dfull, dbuf_c, cp_full, a.atty, a.att_lse, c.doc_start, B, Tw, NHt, NKVt,
                                    spec.HS, AttentionRows{chunk * half, half, Tl, k * half});
        if (cp_next != nullptr) cp_next->test();  // moves the gather on (MPI progresses inside its calls)
    }
    // The reduce-scatter's rank-major input goes to cp_full (its q|k|v are used up), not to
    // cp_stage, which the next layer's gather is filling: the same bytes, summed in the same order.
    cp_permute(cp_dfull, cp_full, false);
    cp_full_of = nullptr;
    cpg->reduce_scatter(dbuf_4c, cp_full, n, dt);  // each rank's rows, summed in rank order
}

}  // namespace llmtrain
