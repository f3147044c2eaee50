// parallel/zero.cpp — the ZeRO engine (see zero.hpp for the stages and the buffers they keep).
//
// Ordering: every rank runs the same model code, so collectives start in the same order on every
// rank of a group (MPI and NCCL both require it). Async handles are waited for in the order they
// were started. When grad_reduce_dtype differs from the act dtype, gradients are cast piece by piece
// into shared wire buffers, so each such reduction completes before the next one starts.
#include "parallel/zero.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace llmtrain {

ZeroEngine::ZeroEngine(Allocator& alloc, const ParamLayout& layout, Comm& zero, Comm& replicas, const ZeroOptions& opt)
    : alloc_(alloc), ops_(alloc.ops()), layout_(layout), zero_(zero), replicas_(replicas), opt_(opt),
      es_(dtype_size(alloc.ops().act_dtype())), wire_es_(dtype_size(opt.reduce_dtype)), N_(zero.size()),
      host_wait_(alloc.ops()) {
    if (opt_.stage < 0 || opt_.stage > 3)
        throw std::invalid_argument("parallel.zero_stage: expected 0, 1, 2 or 3, got " + std::to_string(opt_.stage));
    if (opt_.stage == 0 && N_ != 1)
        throw std::invalid_argument("ZeroEngine: stage 0 shards nothing, so its ZeRO group must be one rank");
    if (opt_.reduce_dtype != DType::f32 && opt_.reduce_dtype != DType::bf16)
        throw std::invalid_argument("parallel.grad_reduce_dtype: expected \"fp32\" or \"bf16\"");
    shard_ = layout_.shard(zero_.rank(), N_);  // throws when the layout does not split
    const auto& units = layout_.units();
    held_.assign(units.size(), opt_.units.empty());
    for (int u : opt_.units) {
        if (u < 0 || size_t(u) >= units.size())
            throw std::invalid_argument("ZeroEngine: unit " + std::to_string(u) + " does not exist");
        held_[size_t(u)] = true;
    }
    if (!opt_.units.empty() && opt_.stage >= 2)
        throw std::invalid_argument("parallel.zero_stage: ZeRO-2/3 cannot hold a pipeline stage's units");
    size_t max_unit = 0, max_chunk = 0;
    for (size_t u = 0; u < units.size(); ++u) {
        if (!held_[u]) shard_[u].numel = 0;
        local_off_.push_back(shard_numel_);
        full_off_.push_back(full_numel_);
        shard_numel_ += shard_[u].numel;
        if (held_[u]) full_numel_ += units[u].numel;
        if (shard_[u].numel > 0) ranges_.push_back(shard_[u]);
        if (u > 0) max_unit = std::max(max_unit, units[u].numel);
        max_chunk = std::max(max_chunk, shard_[u].numel);
    }
    if (opt_.stage <= 2) params_ = alloc_cat(MemCategory::params, full_numel_ * es_);
    if (opt_.stage <= 1) grads_ = alloc_cat(MemCategory::grads, full_numel_ * es_);
    pshard_ = opt_.stage == 0 ? params_ : alloc_cat(MemCategory::params, shard_numel_ * es_);
    gshard_ = opt_.stage == 0 ? grads_ : alloc_cat(MemCategory::grads, shard_numel_ * es_);
    if (opt_.stage >= 2) {
        gemb_.buf = alloc_cat(MemCategory::comm, units[0].numel * es_);
        gemb_.tmp = alloc_cat(MemCategory::comm, shard_[0].numel * es_);
        for (Slot& s : gslots_) {
            s.buf = alloc_cat(MemCategory::comm, max_unit * es_);
            s.tmp = alloc_cat(MemCategory::comm, max_chunk * es_);
        }
    }
    if (opt_.stage == 3) {
        pemb_.buf = alloc_cat(MemCategory::comm, units[0].numel * es_);
        for (Slot& s : pslots_) s.buf = alloc_cat(MemCategory::comm, max_unit * es_);
    }
    if (opt_.reduce_dtype != ops_.act_dtype() && (N_ > 1 || replicas_.size() > 1)) {
        piece_ = std::clamp(opt_.reduce_piece_bytes / (size_t(N_) * wire_es_), size_t(1), std::max(max_chunk, size_t(1)));
        if (opt_.stage == 1 || (opt_.stage >= 2 && N_ > 1))  // the stages that reduce-scatter through it
            wire_send_ = alloc_cat(MemCategory::comm, size_t(N_) * piece_ * wire_es_);
        wire_recv_ = alloc_cat(MemCategory::comm, piece_ * wire_es_);
    }
    // A device-to-host copy into pageable memory blocks the host until the stream gets there (on a
    // GPU), outside any timeout; into pinned memory it is queued like a kernel.
    norm_host_ = static_cast<float*>(ops_.malloc_host(sizeof(float)));
}

ZeroEngine::~ZeroEngine() {
    for (Slot* s : {&pemb_, &pslots_[0], &pslots_[1], &gemb_, &gslots_[0], &gslots_[1]}) s->pending.reset();
    for (void* p : owned_) alloc_.release(p);
    ops_.free_host(norm_host_);
}

void* ZeroEngine::alloc_cat(MemCategory c, size_t bytes) {
    void* p = alloc_.alloc(c, bytes);
    owned_.push_back(p);
    return p;
}

size_t ZeroEngine::chunk(int u) const { return shard_[u].numel; }

char* ZeroEngine::full_at(void* base, int u) const { return static_cast<char*>(base) + full_off_[u] * es_; }

char* ZeroEngine::shard_at(void* base, int u) const { return static_cast<char*>(base) + local_off_[u] * es_; }

// ---- the step ----

void ZeroEngine::begin_step() {
    if (grads_) ops_.memset(grads_, 0, full_numel_ * es_);
    if (gshard_ != grads_) ops_.memset(gshard_, 0, shard_numel_ * es_);
}

void ZeroEngine::start_reduce(Slot& s) {
    const int u = s.unit;
    const size_t n = chunk(u);
    if (N_ == 1) {  // nothing to scatter: the "sum" is our own gradient
        ops_.memcpy_d2d(s.tmp, s.buf, n * es_);
        return;
    }
    if (wire_recv_ == nullptr) {
        s.pending = zero_.reduce_scatter_sum_async(s.buf, s.tmp, n, ops_.act_dtype());
        return;
    }
    reduce_scatter_wire(s.buf, s.tmp, u);
}

void ZeroEngine::reduce_scatter_wire(const void* src, void* dst, int u) {
    // Rank r's chunk is elements [r·n, (r+1)·n) of the unit. Piece j takes elements [j, j + len) of
    // every chunk, cast back to back into wire_send_ in rank order, so the reduce-scatter hands each
    // rank the sum of its own part: dst[j, j + len).
    const size_t n = chunk(u);
    for (size_t j = 0; j < n; j += piece_) {
        const size_t len = std::min(piece_, n - j);
        if (len == n)  // the piece holds every chunk whole: that is the unit as it lies, one cast
            ops_.cast(wire_send_, opt_.reduce_dtype, src, ops_.act_dtype(), size_t(N_) * n);
        else
            for (int r = 0; r < N_; ++r)
                ops_.cast(static_cast<char*>(wire_send_) + size_t(r) * len * wire_es_, opt_.reduce_dtype,
                          static_cast<const char*>(src) + (size_t(r) * n + j) * es_, ops_.act_dtype(), len);
        zero_.reduce_scatter_sum(wire_send_, wire_recv_, len, opt_.reduce_dtype);
        ops_.cast(static_cast<char*>(dst) + j * es_, ops_.act_dtype(), wire_recv_, opt_.reduce_dtype, len);
    }
}

void ZeroEngine::finish_reduce(Slot& s) {
    if (s.unit < 0) return;
    if (s.pending) s.pending->wait();
    s.pending.reset();
    char* dst = shard_at(gshard_, s.unit);
    ops_.residual_forward(dst, dst, s.tmp, chunk(s.unit));  // accumulate over micro-batches
    reduce_order_.erase(std::remove(reduce_order_.begin(), reduce_order_.end(), &s), reduce_order_.end());
    s.unit = -1;
}

void ZeroEngine::reduce_grads() {
    while (!reduce_order_.empty()) finish_reduce(*reduce_order_.front());
    for (auto& h : early_ops_) h->wait();  // reduce_during_backward's, in the order started
    early_ops_.clear();
    std::vector<bool> done(layout_.units().size(), false);
    if (early_unit_.size() == done.size()) done.swap(early_unit_);  // done: what the backward reduced; early_unit_ cleared for the next step
    early_ = false;
    if (opt_.stage == 1) {
        for (size_t u = 0; u < layout_.units().size(); ++u) {
            if (!held_[u] || done[u]) continue;
            const char* src = full_at(grads_, int(u));
            const size_t n = chunk(int(u));
            if (wire_recv_ == nullptr)
                zero_.reduce_scatter_sum(src, shard_at(gshard_, int(u)), n, ops_.act_dtype());
            else
                reduce_scatter_wire(src, shard_at(gshard_, int(u)), int(u));
        }
    }
    if (replicas_.size() == 1) return;
    if (wire_recv_ == nullptr) {
        if (opt_.stage == 0 && std::find(done.begin(), done.end(), true) != done.end()) {
            for (size_t u = 0; u < layout_.units().size(); ++u)  // the units the backward did not report
                if (held_[u] && !done[u]) replicas_.all_reduce_sum(full_at(grads_, int(u)), chunk(int(u)), ops_.act_dtype());
            return;
        }
        replicas_.all_reduce_sum(gshard_, shard_numel_, ops_.act_dtype());
        return;
    }
    for (size_t j = 0; j < shard_numel_; j += piece_) {  // piece by piece: the cast buffer stays one piece
        const size_t len = std::min(piece_, shard_numel_ - j);
        char* g = static_cast<char*>(gshard_) + j * es_;
        ops_.cast(wire_recv_, opt_.reduce_dtype, g, ops_.act_dtype(), len);
        replicas_.all_reduce_sum(wire_recv_, len, opt_.reduce_dtype);
        ops_.cast(g, ops_.act_dtype(), wire_recv_, opt_.reduce_dtype, len);
    }
}

float ZeroEngine::grad_norm_squared(float* scratch, bool skip_embeddings, bool skip_replicated) {
    if (!skip_replicated) {
        const size_t skip = skip_embeddings ? chunk(0) : 0;  // unit 0 comes first in the shard
        ops_.norm_squared(scratch, static_cast<const char*>(gshard_) + skip * es_, shard_numel_ - skip, false);
    } else {  // the split tensors' parts of the shard only (padding is zero: left out)
        ops_.memset(scratch, 0, sizeof(float));
        for (const FlatRange& r : shard_pieces(true, skip_embeddings))
            ops_.norm_squared(scratch, static_cast<const char*>(gshard_) + r.offset * es_, r.numel, true);
    }
    return finish_norm(scratch);
}

float ZeroEngine::pieces_norm_squared(float* scratch, const std::vector<FlatRange>& pieces) {
    ops_.memset(scratch, 0, sizeof(float));
    for (const FlatRange& r : pieces)
        ops_.norm_squared(scratch, static_cast<const char*>(gshard_) + r.offset * es_, r.numel, true);
    return finish_norm(scratch);
}

float ZeroEngine::finish_norm(float* scratch) {
    zero_.all_reduce_sum(scratch, 1, DType::f32);  // replicas hold the same shard: the ZeRO group covers all
    // Each replica's ZeRO group sums on its own communicator, in an order NCCL does not promise to
    // share between communicators: every replica takes replica 0's sum, so the whole dp applies
    // bitwise the same clip scale and the replicas' weights cannot drift apart. (A one-rank group
    // sums nothing: norm_squared's fixed partial sums give every replica the same bits.)
    if (N_ > 1 && replicas_.size() > 1) replicas_.broadcast(scratch, 1, DType::f32, 0);
    ops_.memcpy_d2h(norm_host_, scratch, sizeof(float));
    host_wait_("reading the gradient norm", {{&zero_, "zero group"}, {&replicas_, "replica group"}});
    return *norm_host_;
}

std::vector<FlatRange> ZeroEngine::shard_pieces(bool split, bool skip_embeddings) const {
    return shard_pieces_where([&](const ParamTensor& t) {
        return (t.split != TPSplit::replicated) == split && !(skip_embeddings && t.unit == 0);
    });
}

std::vector<FlatRange> ZeroEngine::shard_pieces_where(const std::function<bool(const ParamTensor&)>& keep) const {
    std::vector<FlatRange> out;
    for (const ParamTensor& t : layout_.tensors()) {
        if (!held_[size_t(t.unit)] || !keep(t)) continue;
        const FlatRange& c = shard_[size_t(t.unit)];  // this rank's chunk of the tensor's unit
        const size_t b = std::max(t.offset, c.offset), e = std::min(t.offset + t.numel, c.offset + c.numel);
        if (b >= e) continue;
        const size_t at = local_off_[size_t(t.unit)] + (b - c.offset);
        if (!out.empty() && out.back().offset + out.back().numel == at) out.back().numel += e - b;
        else out.push_back({at, e - b});
    }
    return out;
}

void ZeroEngine::gather_params() {
    if (opt_.stage == 3) pemb_.unit = -1;  // the gathered embeddings are stale now
    if (opt_.stage != 1 && opt_.stage != 2) return;
    for (size_t u = 0; u < layout_.units().size(); ++u)
        if (held_[u]) zero_.all_gather(shard_at(pshard_, int(u)), full_at(params_, int(u)), chunk(int(u)), ops_.act_dtype());
}

// ---- ParamStore ----

void ZeroEngine::start_gather(Slot& s, int u) {
    s.unit = u;
    s.pending = zero_.all_gather_async(shard_at(pshard_, u), s.buf, chunk(u), ops_.act_dtype());
}

ZeroEngine::Slot& ZeroEngine::param_slot_for(int u, int avoid) {
    if (u == 0) return pemb_;
    for (Slot& s : pslots_)
        if (s.unit == u) return s;
    for (Slot& s : pslots_)  // a free slot, preferably not the one holding the prefetch of `avoid`
        if (!s.in_use && s.unit != avoid) return s;
    for (Slot& s : pslots_)
        if (!s.in_use) return s;
    throw std::logic_error("ZeroEngine: more than two units acquired at once");
}

const void* ZeroEngine::acquire_params(int u, int next) {
    if (opt_.stage < 3) return full_at(params_, u);
    Slot& s = param_slot_for(u, next);
    if (s.unit != u) {
        if (s.pending) s.pending->wait();  // a prefetch nobody used: let it land first
        start_gather(s, u);
    }
    if (s.pending) s.pending->wait();
    s.pending.reset();
    s.in_use = true;
    if (next >= 0 && next != u) {  // prefetch the next unit while u computes
        Slot& p = param_slot_for(next, u);
        if (p.unit != next && !p.in_use) {
            if (p.pending) p.pending->wait();
            start_gather(p, next);
        }
    }
    return s.buf;
}

void ZeroEngine::release_params(int u) {
    if (opt_.stage < 3) return;
    Slot& s = u == 0 ? pemb_ : *std::find_if(pslots_.begin(), pslots_.end(), [&](const Slot& x) { return x.unit == u; });
    s.in_use = false;
    if (u != 0) s.unit = -1;  // layers are gathered again for backward; the embeddings stay until the step
}

void* ZeroEngine::acquire_grads(int u) {
    if (opt_.stage < 2) return full_at(grads_, u);
    Slot* s = &gemb_;
    if (u != 0) {
        s = &gslots_[next_gslot_];
        next_gslot_ ^= 1;
    }
    finish_reduce(*s);  // its previous reduce-scatter must land before the buffer is reused
    ops_.memset(s->buf, 0, layout_.units()[u].numel * es_);
    s->unit = u;
    s->in_use = true;
    return s->buf;
}

void ZeroEngine::reduce_during_backward(bool on) {
    const bool something = opt_.stage == 0 ? replicas_.size() > 1 : opt_.stage == 1 && N_ > 1;
    early_ = on && something && wire_recv_ == nullptr;
    if (early_unit_.empty()) early_unit_.assign(layout_.units().size(), false);
}

void ZeroEngine::grads_done(int u) {
    if (opt_.stage < 2) {
        if (!early_ || !held_[size_t(u)] || early_unit_[size_t(u)]) return;
        for (auto& h : early_ops_) h->test();  // the earlier units' transfers move on meanwhile
        char* g = full_at(grads_, u);  // stage 0: the shard is the whole buffer (N = 1)
        early_ops_.push_back(opt_.stage == 0
                                 ? replicas_.all_reduce_sum_async(g, chunk(u), ops_.act_dtype())
                                 : zero_.reduce_scatter_sum_async(g, shard_at(gshard_, u), chunk(u), ops_.act_dtype()));
        early_unit_[size_t(u)] = true;
        return;
    }
    Slot& s = u == 0 ? gemb_ : *std::find_if(gslots_.begin(), gslots_.end(), [&](const Slot& x) { return x.unit == u; });
    s.in_use = false;
    start_reduce(s);
    reduce_order_.push_back(&s);
}

void ZeroEngine::host_wait(Ops& ops, Event e, const char* what) {
    poll_with_watchdog([&] { return ops.query_event(e); }, {{&zero_, "zero group"}, {&replicas_, "replica group"}},
                       what);
}

void ZeroEngine::upload(const std::vector<Upload>& parts, const char* what) {
    // bf16 goes through an fp32 staging buffer of at most 4M elements (16 MiB): the planner and
    // --dry-run count the steady state, which a staging buffer of the whole stage would exceed.
    constexpr size_t kStage = size_t(1) << 22;
    const bool cast = ops_.act_dtype() != DType::f32;
    const size_t stage_numel = cast ? std::min(std::max(full_numel_, shard_numel_), kStage) : 0;
    void* staging = cast ? alloc_.alloc(MemCategory::workspace, stage_numel * 4) : nullptr;
    for (const Upload& p : parts) {  // host fp32 -> device act dtype
        if (!cast) {
            ops_.memcpy_h2d(p.dst, p.src, p.n * 4);
            continue;
        }
        for (size_t i = 0; i < p.n; i += stage_numel) {
            const size_t k = std::min(stage_numel, p.n - i);
            ops_.memcpy_h2d(staging, p.src + i, k * 4);
            // The next piece's upload queues behind this cast: the stream orders the staging reuse.
            ops_.cast(static_cast<char*>(p.dst) + i * dtype_size(ops_.act_dtype()), ops_.act_dtype(), staging,
                      DType::f32, k);
        }
    }
    // Pageable sources are staged when an upload is queued (CUDA's rule), so the caller's may go
    // after; the wait keeps the staging buffer alive until its last cast has read it.
    host_wait_(what, {{&zero_, "zero group"}, {&replicas_, "replica group"}});
    alloc_.release(staging);
}

void ZeroEngine::load_params(const float* host) {
    std::vector<float> held, mine;
    std::vector<Upload> parts;
    if (params_) {  // the units this stage holds, back to back
        held.reserve(full_numel_);
        for (size_t u = 0; u < layout_.units().size(); ++u) {
            const ParamUnit& pu = layout_.units()[u];
            if (held_[u]) held.insert(held.end(), host + pu.offset, host + pu.offset + pu.numel);
        }
        parts.push_back({params_, held.data(), full_numel_});
    }
    if (pshard_ != params_) {
        mine.reserve(shard_numel_);
        for (const FlatRange& r : shard_) mine.insert(mine.end(), host + r.offset, host + r.offset + r.numel);
        parts.push_back({pshard_, mine.data(), shard_numel_});
    }
    upload(parts, "loading the parameters");
    pemb_.unit = -1;
}

void ZeroEngine::load_shard(const float* values) {
    upload({{pshard_, values, shard_numel_}}, "loading the parameter shard");
    gather_params();  // stages 1, 2: the full params from every rank's shard (copies: the same bits)
    host_wait_("gathering the loaded parameters", {{&zero_, "zero group"}, {&replicas_, "replica group"}});
    pemb_.unit = -1;
}

}  // namespace llmtrain
