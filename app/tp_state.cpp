// app/tp_state.cpp — a tensor-parallel run's training state between TP parts and whole tensors (see tp_state.hpp).
#include "app/tp_state.hpp"

#include <algorithm>
#include <cstring>

namespace llmtrain {

std::string gather_tp_stage(Comm& world, const Topology& topo, const ParamLayout& full, int zero_shard_multiple,
                            const std::vector<int>& shard_units, const std::vector<int>& held, const float* mine,
                            size_t ns, const std::function<float*(size_t)>& snapshot,
                            std::vector<OptimShardView>& views) {
    const int st = topo.stage(), N = topo.zero_group_size(), TP = topo.tp();
    const int head = topo.rank_of(st, 0, 0, 0), me = topo.world_rank();
    if (me != head) {
        world.send(mine, 3 * ns, DType::f32, head);
        return "";
    }
    size_t nf = 0;
    for (int u : held) nf += full.units()[size_t(u)].numel;
    float* w = snapshot(nf);
    float *m = w + nf, *v = m + nf;
    std::vector<size_t> at(full.units().size(), 0);  // a held unit's offset in the snapshot
    std::vector<bool> saved(full.units().size(), false), in_shard(full.units().size(), false);
    for (int u : shard_units) in_shard[size_t(u)] = true;
    size_t off = 0;
    for (int u : held) {
        const ParamUnit& un = full.units()[size_t(u)];
        at[size_t(u)] = off;
        saved[size_t(u)] = true;
        views.push_back({un.offset, un.offset + un.numel, m + off, v + off, w + off});
        off += un.numel;
    }
    std::fill(w, w + 3 * nf, 0.0f);  // padding
    std::string err;
    std::vector<float> recv(3 * ns), lw, lm, lv;
    for (int t = 0; t < TP; ++t) {
        const ParamLayout lay(full.config(), zero_shard_multiple, TP, t);  // TP rank t's layout
        // TP rank t's local state of this stage's units only, back to back: base[u] is where unit
        // u's local elements start in lw/lm/lv, which hold nothing of the other stages.
        std::vector<size_t> base(lay.units().size(), 0);
        size_t nl = 0;
        for (int u : shard_units) {
            base[size_t(u)] = nl;
            nl += lay.units()[size_t(u)].numel;
        }
        auto scratch_of = [&](size_t u, size_t flat) { return base[u] + (flat - lay.units()[u].offset); };
        lw.assign(nl, 0.0f), lm.assign(nl, 0.0f), lv.assign(nl, 0.0f);
        for (int z = 0; z < N; ++z) {  // TP rank t's local state, from its ZeRO group's shards
            const int src = topo.rank_of(st, 0, z, t);
            const float* p = mine;
            if (src != me) {
                world.recv(recv.data(), recv.size(), DType::f32, src);
                p = recv.data();
            }
            const std::vector<FlatRange> chunks = lay.shard(z, N);  // chunk z of every unit; held ones back to back
            size_t local = 0;
            for (size_t u = 0; u < chunks.size(); ++u) {
                if (!in_shard[u]) continue;
                const FlatRange& c = chunks[u];
                const long at = long(scratch_of(u, c.offset));
                std::copy(p + local, p + local + c.numel, lw.begin() + at);
                std::copy(p + ns + local, p + ns + local + c.numel, lm.begin() + at);
                std::copy(p + 2 * ns + local, p + 2 * ns + local + c.numel, lv.begin() + at);
                local += c.numel;
            }
        }
        for (const ParamTensor& lt : lay.tensors()) {
            const size_t u = size_t(lt.unit);
            if (!saved[u]) continue;
            const ParamTensor& ft = full.find(lt.name);
            const size_t dst = at[u] + (ft.offset - full.units()[u].offset), src = scratch_of(u, lt.offset);
            if (lt.split == TPSplit::replicated && t != 0) {
                // Saved from TP rank 0; every other TP rank's copy must be the same bits (equal
                // gradients, one clip scale: nothing may make them drift).
                const size_t bytes = lt.numel * sizeof(float);
                if (err.empty() && (std::memcmp(lw.data() + src, w + dst, bytes) != 0 ||
                                    std::memcmp(lm.data() + src, m + dst, bytes) != 0 ||
                                    std::memcmp(lv.data() + src, v + dst, bytes) != 0))
                    err = "checkpoint: the replicated tensor " + lt.name + " of TP rank " + std::to_string(t) +
                          " (world rank " + std::to_string(topo.rank_of(st, 0, 0, t)) +
                          ") differs from TP rank 0's (weights or AdamW state)";
                continue;
            }
            lay.place_local(lt, lw.data() + src, w + dst);
            lay.place_local(lt, lm.data() + src, m + dst);
            lay.place_local(lt, lv.data() + src, v + dst);
        }
    }
    return err;
}

void read_tp_local(const std::string& dir, const ParamLayout& full, const ParamLayout& local, float* w, float* m,
                   float* v) {
    const size_t nl = local.total_numel();
    std::fill(w, w + nl, 0.0f), std::fill(m, m + nl, 0.0f), std::fill(v, v + nl, 0.0f);
    {
        std::vector<float> whole(full.total_numel());  // model.h5 reads whole
        read_params(dir, full, whole.data());
        local.cut_local_flat(full, whole.data(), w);
    }
    // The moments unit by unit (read_optim takes a flat range): one unit of m and v on the host at a time.
    std::vector<float> mu, vu;
    for (size_t u = 0; u < full.units().size(); ++u) {
        const ParamUnit& un = full.units()[u];
        mu.resize(un.numel), vu.resize(un.numel);
        read_optim(dir, full, un.offset, un.offset + un.numel, mu.data(), vu.data());
        for (const ParamTensor& lt : local.tensors()) {
            if (size_t(lt.unit) != u) continue;
            const size_t at = full.find(lt.name).offset - un.offset;
            local.cut_local(lt, mu.data() + at, m + lt.offset);
            local.cut_local(lt, vu.data() + at, v + lt.offset);
        }
    }
}

}  // namespace llmtrain
