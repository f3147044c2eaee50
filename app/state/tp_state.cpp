// app/state/tp_state.cpp — a tensor-parallel run's training state from TP parts to whole-tensor pieces (see tp_state.hpp).
#include "app/state/tp_state.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace llmtrain {

namespace {

/// Whether tensor t is held whole by every layout of the group (TP's replicated tensors; at ep > 1
/// the dense ones): saved from layout 0, the others' copies checked against it.
bool held_whole(const ParamLayout& lay, const ParamTensor& t) {
    return t.split == TPSplit::replicated && !(t.expert && lay.ep() > 1);
}

/// One run of a rank's shard inside a writer's piece: `count` elements from shard-local index
/// `local` are flat elements [flat, flat + count) of the whole-model layout.
struct ShareRun {
    size_t local, flat, count;
    bool replicated;
    const std::string* name;  ///< the tensor's name (for the replicated copies' check)
};

/// The runs of the shard of ZeRO index z of `lay` (a TP rank's local layout, sharded over N)
/// over the units marked in in_shard that land in [lo, hi) of `full`, in shard-local order.
std::vector<ShareRun> share_runs(const ParamLayout& lay, const ParamLayout& full, const std::vector<bool>& in_shard,
                                 int z, int N, size_t lo, size_t hi) {
    std::vector<ShareRun> out;
    if (lo >= hi) return out;
    const std::vector<FlatRange> chunks = lay.shard(z, N);
    std::vector<size_t> base(chunks.size(), 0);  // unit u's chunk in the shard-local buffer
    size_t pos = 0;
    for (size_t u = 0; u < chunks.size(); ++u) {
        base[u] = pos;
        if (in_shard[u]) pos += chunks[u].numel;
    }
    for (size_t i = 0; i < lay.tensors().size(); ++i) {  // the same tensor order at every tp
        const ParamTensor& lt = lay.tensors()[i];
        const ParamTensor& ft = full.tensors()[i];
        const size_t u = size_t(lt.unit);
        if (!in_shard[u] || ft.offset >= hi || ft.offset + ft.numel <= lo) continue;
        const FlatRange& c = chunks[u];
        const size_t a = std::max(lt.offset, c.offset), b = std::min(lt.offset + lt.numel, c.offset + c.numel);
        if (a >= b) continue;
        for (const TPRun& r : lay.local_runs(lt, a - lt.offset, b - lt.offset)) {
            const size_t f0 = ft.offset + r.full, s = std::max(f0, lo), e = std::min(f0 + r.count, hi);
            if (s < e)
                out.push_back({base[u] + (lt.offset + r.local - c.offset) + (s - f0), s, e - s,
                               held_whole(lay, lt), &lt.name});
        }
    }
    return out;
}

size_t total_count(const std::vector<ShareRun>& runs) {
    size_t n = 0;
    for (const ShareRun& r : runs) n += r.count;
    return n;
}

}  // namespace

FlatRange tp_piece(const ParamLayout& full, const std::vector<int>& held, int writers, int w) {
    if (held.empty()) throw std::invalid_argument("tp_piece: no unit to save");
    const size_t lo = full.units()[size_t(held.front())].offset;
    size_t hi = lo;
    for (int u : held) {
        const ParamUnit& un = full.units()[size_t(u)];
        if (un.offset != hi) throw std::invalid_argument("tp_piece: the saved units are not contiguous");
        hi += un.numel;
    }
    const size_t q = (hi - lo + size_t(writers) - 1) / size_t(writers);
    const size_t a = std::min(hi, lo + size_t(w) * q), b = std::min(hi, a + q);
    return {a, b - a};
}

namespace {

/// The ranks holding one copy of a stage's state, as exchange_state sees them: layout t (its
/// local layout, t = 0 the copy saved of a tensor every layout holds whole) and ZeRO index z of N
/// are writer writer(t, z), world rank rank(t, z).
struct Holders {
    std::vector<ParamLayout> lays;
    int N = 1;
    std::function<int(int, int)> writer, rank;
    int my_t = 0, my_z = 0;
};

/// exchange_tp_stage over any group of holders (see tp_state.hpp): writer w of W = lays x N.
std::string exchange_state(Comm& world, const Holders& h, const ParamLayout& full, const std::vector<int>& shard_units,
                           const std::vector<int>& held, const float* mine, size_t ns,
                           const std::function<float*(size_t)>& snapshot, std::vector<OptimShardView>& views,
                           const char* group) {
    const int N = h.N, TP = int(h.lays.size()), W = N * TP;
    const int me = h.rank(h.my_t, h.my_z), my_w = h.writer(h.my_t, h.my_z);
    std::vector<bool> in_shard(full.units().size(), false);
    for (int u : shard_units) in_shard[size_t(u)] = true;
    const ParamLayout& mylay = h.lays[size_t(h.my_t)];
    std::string err;
    std::vector<float> buf;
    for (int w = 0; w < W; ++w) {  // writer order: every holder agrees on it
        const FlatRange piece = tp_piece(full, held, W, w);
        const size_t lo = piece.offset, hi = piece.offset + piece.numel;
        if (w != my_w) {  // send the writer my elements of its piece: w | m | v
            const std::vector<ShareRun> runs = share_runs(mylay, full, in_shard, h.my_z, N, lo, hi);
            const size_t n = total_count(runs);
            if (n == 0) continue;
            buf.resize(3 * n);
            size_t o = 0;
            for (const ShareRun& r : runs) {
                for (size_t g = 0; g < 3; ++g) std::copy_n(mine + g * ns + r.local, r.count, buf.data() + g * n + o);
                o += r.count;
            }
            int wt = 0, wz = 0;  // the writer's coordinates
            for (int t = 0; t < TP; ++t)
                for (int z = 0; z < N; ++z)
                    if (h.writer(t, z) == w) wt = t, wz = z;
            world.send(buf.data(), buf.size(), DType::f32, h.rank(wt, wz));
            continue;
        }
        float* wp = snapshot(piece.numel);
        float* mp = wp + piece.numel;
        float* vp = mp + piece.numel;
        std::fill(wp, wp + 3 * piece.numel, 0.0f);  // padding
        if (piece.numel > 0) views.push_back({lo, hi, mp, vp, wp});
        for (int t = 0; t < TP; ++t)  // layout 0 first: the copy of the whole-held tensors that is saved
            for (int z = 0; z < N; ++z) {
                const std::vector<ShareRun> runs = share_runs(h.lays[size_t(t)], full, in_shard, z, N, lo, hi);
                const size_t n = total_count(runs);
                if (n == 0) continue;
                const int src = h.rank(t, z);
                const float* p = mine;  // my own shard: read in place, at its shard-local indices
                size_t stride = ns;
                if (src != me) {
                    buf.resize(3 * n);
                    world.recv(buf.data(), buf.size(), DType::f32, src);
                    p = buf.data(), stride = n;
                }
                size_t o = 0;
                for (const ShareRun& r : runs) {
                    const size_t at = src == me ? r.local : o;
                    o += r.count;
                    const size_t dst = r.flat - lo, bytes = r.count * sizeof(float);
                    if (!r.replicated || t == 0) {
                        for (size_t g = 0; g < 3; ++g) std::memcpy(wp + g * piece.numel + dst, p + g * stride + at, bytes);
                        continue;
                    }
                    // Saved from layout 0; every other holder's copy must be the same bits (equal
                    // gradients, one clip scale: nothing may make them drift).
                    bool same = true;
                    for (size_t g = 0; g < 3; ++g)
                        same = same && std::memcmp(wp + g * piece.numel + dst, p + g * stride + at, bytes) == 0;
                    if (!same && err.empty())
                        err = "checkpoint: the replicated tensor " + *r.name + " of " + group + " rank " +
                              std::to_string(t) + " (world rank " + std::to_string(src) + ") differs from " + group +
                              " rank 0's (weights or AdamW state)";
                }
            }
    }
    return err;
}

}  // namespace

std::string exchange_tp_stage(Comm& world, const Topology& topo, const ParamLayout& full, int zero_shard_multiple,
                              const std::vector<int>& shard_units, const std::vector<int>& held, const float* mine,
                              size_t ns, const std::function<float*(size_t)>& snapshot,
                              std::vector<OptimShardView>& views) {
    Holders h;
    const int st = topo.stage(), N = topo.zero_group_size();
    for (int t = 0; t < topo.tp(); ++t) h.lays.emplace_back(full.config(), zero_shard_multiple, topo.tp(), t);
    h.N = N;
    h.writer = [N](int t, int z) { return t * N + z; };
    h.rank = [&topo, st](int t, int z) { return topo.rank_of(st, 0, z, t); };
    h.my_t = topo.tp_index(), h.my_z = topo.zero_index();
    return exchange_state(world, h, full, shard_units, held, mine, ns, snapshot, views, "TP");
}

std::string exchange_ep_state(Comm& world, const Topology& topo, const ExpertDp& x, const ParamLayout& full,
                              int zero_shard_multiple, const std::vector<int>& shard_units, const std::vector<int>& held,
                              const float* mine, size_t ns, const std::function<float*(size_t)>& snapshot,
                              std::vector<OptimShardView>& views) {
    Holders h;  // holder i = e x T + t: EP index e, TP index t (T = 1 without tensor parallelism)
    const int P = x.ep, T = topo.tp(), zg = topo.zero_group_size(), st = topo.stage();
    for (int e = 0; e < P; ++e)
        for (int t = 0; t < T; ++t) h.lays.emplace_back(full.config(), zero_shard_multiple, T, t, P, e);
    h.N = x.zero_size;
    h.writer = [P, T](int i, int z) { return (z * P + i / T) * T + i % T; };  // its dp index x T + TP index
    h.rank = [&topo, P, T, zg, st](int i, int z) {
        const int d = z * P + i / T;
        return topo.rank_of(st, d / zg, d % zg, i % T);
    };
    h.my_t = x.ep_index * T + topo.tp_index(), h.my_z = topo.dp_index() / P % x.zero_size;
    return exchange_state(world, h, full, shard_units, held, mine, ns, snapshot, views, "EP");
}

}  // namespace llmtrain
