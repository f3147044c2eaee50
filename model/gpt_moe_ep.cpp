// model/gpt_moe_ep.cpp — a mixture-of-experts layer with its experts spread over an expert-parallel
// group (GPTOptions::ep; docs/parallelism.md "Expert parallelism"). GShard (Lepikhin et al. 2020) and
// Switch Transformer (Fedus et al. 2021) place each expert on one device and move every token's row
// to its expert's device and back by all-to-all; here, with P ranks and El = E/P experts each:
//
//   forward   dispatch (router, plan, rows grouped by expert: a.moe.xg (N·k,C))   here
//             counts: El per peer, then rows: peer q gets the block of its experts  all-to-all
//             regroup source-major -> expert-major (within an expert: rank order, then token order)
//             this rank's El experts on the received rows -> back to source-major
//             outputs home (into a.moe.yg, the grouped order the combine reads)      all-to-all
//             combine (+ the gates)                                                  here
//   backward  the combine's backward -> d yg out, d outputs of my experts in          all-to-all
//             my experts' backward (their weight gradients +=) -> d rows home          all-to-all
//             the dispatch's backward (permute, balance loss, router)                 here
//
// The counts are read on the host (Ops::memcpy_d2h, then synchronize) to size the exchanges; the
// receive buffers are sized for the dropless bound Rmax = P·N·k (model/moe_ep_buffers.hpp).
// Each rank holds its El experts' weights only (ParamLayout ep = P: the expert tensors are
// (El, ...) slices of the whole (E, ...)); the expert-data-parallel sum adds each expert's gradient
// from the dp/P ranks that hold it (parallel/ep_grads.hpp).
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gpt_impl.hpp"

namespace llmtrain {

namespace {

/// The exchange plan of one layer, in rows: send[q] rows go to rank q (the block of its experts in
/// the grouped rows), recv[q] come from it; from[q*El + j] rows of local expert j come from rank q.
struct EpPlan {
    std::vector<size_t> send, recv;  // (P) rows
    std::vector<int> from;           // (P·El)
    std::vector<int> offsets;        // (El+1) expert-major offsets of the received rows
    size_t rows = 0;                 // received rows in all
};

/// Reads a layer's plan: its dispatch offsets (E+1) and received counts (P·El), both device int32.
EpPlan read_plan(Ops& ops, const int* offsets, const int* counts, int P, int El) {
    EpPlan p;
    std::vector<int> off(size_t(P) * El + 1);
    p.from.resize(size_t(P) * El);
    ops.memcpy_d2h(off.data(), offsets, off.size() * 4);
    ops.memcpy_d2h(p.from.data(), counts, p.from.size() * 4);
    ops.synchronize();
    p.send.resize(size_t(P));
    p.recv.assign(size_t(P), 0);
    p.offsets.assign(size_t(El) + 1, 0);
    for (int q = 0; q < P; ++q) {
        p.send[size_t(q)] = size_t(off[size_t(q + 1) * El] - off[size_t(q) * El]);
        for (int j = 0; j < El; ++j) {
            p.recv[size_t(q)] += size_t(p.from[size_t(q) * El + j]);
            p.offsets[size_t(j) + 1] += p.from[size_t(q) * El + j];
        }
    }
    for (int j = 0; j < El; ++j) p.offsets[size_t(j) + 1] += p.offsets[size_t(j)];
    p.rows = size_t(p.offsets[size_t(El)]);
    return p;
}

/// Moves rows (of `row_bytes`) between the source-major order of the exchange (block q, then
/// within it local expert j) and the expert-major order of the experts (expert j, then within it
/// block q): to_expert_major copies src (source-major) into dst (expert-major), else back.
void regroup(Ops& ops, void* dst, const void* src, const EpPlan& p, int P, int El, size_t row_bytes,
             bool to_expert_major) {
    size_t s = 0;  // source-major row
    std::vector<size_t> e(static_cast<size_t>(El));
    for (int j = 0; j < El; ++j) e[size_t(j)] = size_t(p.offsets[size_t(j)]);
    for (int q = 0; q < P; ++q)
        for (int j = 0; j < El; ++j) {
            const size_t n = size_t(p.from[size_t(q) * El + j]);
            if (n > 0) {
                const size_t xs = s * row_bytes, xe = e[size_t(j)] * row_bytes;
                if (to_expert_major)
                    ops.memcpy_d2d(static_cast<char*>(dst) + xe, static_cast<const char*>(src) + xs, n * row_bytes);
                else
                    ops.memcpy_d2d(static_cast<char*>(dst) + xs, static_cast<const char*>(src) + xe, n * row_bytes);
            }
            s += n;
            e[size_t(j)] += n;
        }
}

/// Row counts as element counts of `width` elements per row.
std::vector<size_t> elems(const std::vector<size_t>& rows, size_t width) {
    std::vector<size_t> e(rows.size());
    for (size_t q = 0; q < rows.size(); ++q) e[q] = rows[q] * width;
    return e;
}

}  // namespace

void GPT::Impl::set_expert_parallel(ExpertParallel* ep) {
    if (ep == nullptr || ep->size() <= 1) return;
    const int P = ep->size();
    if (!spec.moe())
        throw std::invalid_argument("parallel.ep: expert parallelism needs model.moe (n_experts > 0), got ep = " +
                                    std::to_string(P));
    if (spec.E % P != 0)
        throw std::invalid_argument("parallel.ep: expected a divisor of model.moe.n_experts = " +
                                    std::to_string(spec.E) + ", got " + std::to_string(P));
    if (layout.ep() != P || layout.ep_rank() != ep->rank())
        throw std::invalid_argument("parallel.ep: the parameter layout holds the experts of EP rank " +
                                    std::to_string(layout.ep_rank()) + " of " + std::to_string(layout.ep()) +
                                    ", but the group is rank " + std::to_string(ep->rank()) + " of " + std::to_string(P));
    epg = ep, nep = P, ep_rank = ep->rank();
}

MoeEpActs GPT::Impl::make_moe_ep_acts(MemCategory cat) {
    MoeEpActs a;
    if (nep <= 1) return a;
    const size_t El = size_t(spec.E / nep), Rmax = size_t(nep) * n_rows() * size_t(spec.K);
    const size_t C = size_t(cfg.n_embd), F = size_t(spec.Fe);
    const size_t nc = align256(size_t(nep) * El * 4), no = align256((El + 1) * 4);
    const size_t nx = align256(Rmax * C * es), ngu = align256(Rmax * 2 * F * es), nh = align256(Rmax * F * es);
    char* p = static_cast<char*>(get(cat, nc + no + nx + ngu + nh));
    a.counts = reinterpret_cast<int*>(p);
    a.offsets = reinterpret_cast<int*>(p + nc);
    a.xr = p + nc + no;
    a.gu = p + nc + no + nx;
    a.h = p + nc + no + nx + ngu;
    return a;
}

void GPT::Impl::make_moe_ep_work() {
    if (nep <= 1) return;
    const size_t Rmax = size_t(nep) * n_rows() * size_t(spec.K);
    const size_t C = size_t(cfg.n_embd), F = size_t(spec.Fe);
    const size_t nx = align256(Rmax * C * es), ngu = align256(Rmax * 2 * F * es), nh = align256(Rmax * F * es);
    char* p = static_cast<char*>(get(MemCategory::workspace, 2 * nx + ngu + nh));
    moe_ep_work.a = p;
    moe_ep_work.b = p + nx;
    moe_ep_work.dgu = p + 2 * nx;
    moe_ep_work.dh = p + 2 * nx + ngu;
}

float GPT::Impl::moe_ep_forward(int i, const void* w, const LayerActs& a, const void* x, void* out, bool write_out) {
    const LayerParams& p = lp[size_t(i)];
    const MoeShape s = moe_shape(i);  // with layer i's selection bias
    const int np = nep, El = s.E / np;
    const size_t C = size_t(s.C), row = C * es;
    const float aux = ops.moe_dispatch_forward(s, a.moe, moe_work, x, P(w, p.router));
    // Counts first: peer q gets this rank's row counts of its El experts (moe_work.counts (E)).
    const std::vector<size_t> per_peer(size_t(np), size_t(El) * 4);  // int32 as bytes
    epg->all_to_all_v(moe_work.counts, per_peer.data(), a.moe_ep.counts, per_peer.data(), DType::u8);
    const EpPlan plan = read_plan(ops, a.moe.offsets, a.moe_ep.counts, np, El);
    ops.memcpy_h2d(a.moe_ep.offsets, plan.offsets.data(), plan.offsets.size() * 4);
    // Then the rows, to the experts' ranks; regrouped expert-major for the experts.
    const DType t = ops.act_dtype();
    std::vector<size_t> send = elems(plan.send, C), recv = elems(plan.recv, C);
    epg->all_to_all_v(a.moe.xg, send.data(), moe_ep_work.a, recv.data(), t);
    regroup(ops, a.moe_ep.xr, moe_ep_work.a, plan, np, El, row, true);
    // This rank's El experts: the whole of its (El, ...) expert tensors.
    ops.moe_ffn_forward(moe_ep_work.b, a.moe_ep.gu, a.moe_ep.h, a.moe_ep.xr, P(w, p.w13), P(w, p.w2), a.moe_ep.offsets,
                        El, s.C, s.F);
    // The outputs home, into the grouped order the combine reads.
    regroup(ops, moe_ep_work.a, moe_ep_work.b, plan, np, El, row, false);
    epg->all_to_all_v(moe_ep_work.a, recv.data(), a.moe.yg, send.data(), t);
    if (write_out) ops.moe_combine_forward(s, a.moe, out, a.moe.yg);
    return aux;
}

void GPT::Impl::moe_ep_backward(const MoeShape& s, int i, const void* w, void* g, const LayerActs& a, const void* x,
                                void* dx, const void* dout, float aux_scale) {
    const LayerParams& p = lp[size_t(i)];
    const int np = nep, El = s.E / np;
    const size_t C = size_t(s.C), row = C * es;
    const EpPlan plan = read_plan(ops, a.moe.offsets, a.moe_ep.counts, np, El);
    const DType t = ops.act_dtype();
    std::vector<size_t> send = elems(plan.send, C), recv = elems(plan.recv, C);
    // d outputs to the experts' ranks, expert-major there.
    ops.moe_combine_backward(s, a.moe, moe_work, moe_work.dyg, dout, a.moe.yg);
    epg->all_to_all_v(moe_work.dyg, send.data(), moe_ep_work.a, recv.data(), t);
    regroup(ops, moe_ep_work.b, moe_ep_work.a, plan, np, El, row, true);
    ops.moe_ffn_backward(moe_ep_work.a, G(g, p.w13), G(g, p.w2), moe_ep_work.dgu, moe_ep_work.dh, moe_ep_work.b,
                         a.moe_ep.xr, a.moe_ep.gu, a.moe_ep.h, P(w, p.w13), P(w, p.w2), a.moe_ep.offsets, El, s.C,
                         s.F);
    // d rows home, then the dispatch's backward.
    regroup(ops, moe_ep_work.b, moe_ep_work.a, plan, np, El, row, false);
    epg->all_to_all_v(moe_ep_work.b, recv.data(), moe_work.dxg, send.data(), t);
    const size_t dropped = size_t(s.N) * size_t(s.k) - std::accumulate(plan.send.begin(), plan.send.end(), size_t(0));
    if (dropped > 0)  // a capacity-limited plan's dropped pairs (after every expert's block): no expert ran them
        ops.memset(static_cast<char*>(moe_work.dxg) + (size_t(s.N) * size_t(s.k) - dropped) * row, 0, dropped * row);
    ops.moe_dispatch_backward(s, a.moe, moe_work, dx, G(g, p.router), moe_work.dxg, x, P(w, p.router), aux_scale);
}

}  // namespace llmtrain
