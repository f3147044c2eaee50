// model/param_layout.cpp — builds the flat parameter layout (see param_layout.hpp) from the
// architecture description's tensors (model/arch.hpp).
//
// Order inside a transformer unit: the 2-D weights first (AdamW decays them), then the norm
// parameters and biases (no decay). Grouping by `decay` lets AdamW update a unit in two
// contiguous runs instead of twelve; checkpoints address tensors by name, so the order is free.
// With tp > 1 every tensor is this TP rank's part (docs/distributed.md "Tensor parallelism"), in the
// same order: the order does not depend on tp.
#include "model/param_layout.hpp"

#include "model/arch.hpp"

#include <algorithm>
#include <stdexcept>

namespace llmtrain {

namespace {

constexpr size_t kTensorAlign = 8;  // elements: 16 bytes in bf16, 32 in fp32

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

}  // namespace

const char* tp_split_name(TPSplit s) {
    switch (s) {
    case TPSplit::replicated: return "replicated";
    case TPSplit::column: return "column";
    case TPSplit::row: return "row";
    case TPSplit::vocab: return "vocab";
    }
    return "?";
}

ParamLayout::ParamLayout(const GPTConfig& cfg, int shard_multiple, int tp, int tp_rank)
    : ParamLayout(cfg, shard_multiple, tp, tp_rank, 1, 0) {}

ParamLayout::ParamLayout(const GPTConfig& cfg, int shard_multiple, int tp, int tp_rank, int ep, int ep_rank)
    : cfg_(cfg), tp_(tp), tp_rank_(tp_rank), ep_(ep), ep_rank_(ep_rank) {
    const ArchSpec spec(cfg);  // validates the sizes and the architecture's keys
    if (ep < 1 || ep_rank < 0 || ep_rank >= ep)
        throw std::invalid_argument("ParamLayout: expert-parallel rank " + std::to_string(ep_rank) +
                                    " outside a group of parallel.ep = " + std::to_string(ep));
    if (ep > 1 && cfg.moe_experts <= 0)
        throw std::invalid_argument("parallel.ep: expert parallelism needs model.moe (n_experts > 0), got ep = " +
                                    std::to_string(ep));
    if (ep > 1 && cfg.moe_experts % ep != 0)
        throw std::invalid_argument("parallel.ep: expected a divisor of model.moe.n_experts = " +
                                    std::to_string(cfg.moe_experts) + ", got " + std::to_string(ep));
    if (shard_multiple < 1)
        throw std::invalid_argument("ParamLayout: shard_multiple must be >= 1, got " +
                                    std::to_string(shard_multiple));
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
        throw std::invalid_argument("ParamLayout: tensor-parallel rank " + std::to_string(tp_rank) +
                                    " outside a group of parallel.tp = " + std::to_string(tp));
    for (const auto& [what, v] : spec.tp_divisors())
        if (v % tp != 0)
            throw std::invalid_argument("parallel.tp = " + std::to_string(tp) + " must divide " + what + " (" +
                                        std::to_string(v) + ")");
    // Units are padded to a multiple of shard_multiple AND of the tensor alignment, so the next
    // unit's first tensor stays aligned; a multiple of lcm(...) is still a multiple of shard_multiple.
    size_t unit_multiple = static_cast<size_t>(shard_multiple);
    while (unit_multiple % kTensorAlign != 0) unit_multiple += shard_multiple;

    size_t pos = 0;
    for (int unit = 0; unit < spec.num_units(); ++unit) {
        const size_t unit_start = pos;
        for (TensorSpec& s : spec.unit_tensors(unit)) {
            // full: the whole tensor's shape; split and blocks say how this rank's shape follows from it.
            ParamTensor t;
            t.name = std::move(s.name);
            t.full_shape = s.shape;
            t.split = s.split;
            t.blocks = s.blocks;
            t.expert = s.role == TensorRole::moe_w13 || s.role == TensorRole::moe_w2;
            std::vector<int64_t> shape = std::move(s.shape);
            if (t.split == TPSplit::column || t.split == TPSplit::vocab) shape[0] /= tp;
            if (t.split == TPSplit::row) shape[1] /= tp;
            if (t.expert) shape[0] /= ep;  // this EP rank's experts (replicated over TP)
            t.numel = 1;
            for (int64_t d : shape) t.numel *= static_cast<size_t>(d);
            t.shape = std::move(shape);
            if (!s.packed) pos = round_up(pos, kTensorAlign);  // packed: right after the previous tensor
            t.offset = pos;
            t.unit = unit;
            t.decay = s.decay;
            t.role = s.role;
            t.init = s.init;
            t.packed = s.packed;
            pos += t.numel;
            nparams_ += t.numel;
            tensors_.push_back(std::move(t));
        }
        pos = round_up(pos, unit_multiple);
        units_.push_back(ParamUnit{unit_start, pos - unit_start});
    }
    total_ = pos;
}

namespace {

/// Calls f(full_index, local_index, count) for each contiguous run of t's local part inside the
/// full tensor (row-major); see TPSplit for which part rank r holds.
template <class F>
void for_each_run(const ParamTensor& t, int tp, int r, int ep_rank, F f) {
    const size_t R = size_t(t.full_shape[0]);
    const size_t K = t.full_shape.size() > 1 ? size_t(t.full_shape[1]) : 1;
    switch (t.split) {
    case TPSplit::replicated:  // an expert tensor: its EP rank's experts, one run (ep_rank 0 at ep 1)
        f(t.expert ? size_t(ep_rank) * t.numel : size_t(0), size_t(0), t.numel);
        break;
    case TPSplit::column:
    case TPSplit::vocab: {
        const size_t rb = R / size_t(t.blocks), part = rb / size_t(tp);  // rows per block, per rank
        for (int b = 0; b < t.blocks; ++b)
            f((size_t(b) * rb + size_t(r) * part) * K, size_t(b) * part * K, part * K);
        break;
    }
    case TPSplit::row: {
        const size_t kl = K / size_t(tp);
        for (size_t i = 0; i < R; ++i) f(i * K + size_t(r) * kl, i * kl, kl);
        break;
    }
    }
}

}  // namespace

void ParamLayout::cut_local(const ParamTensor& t, const float* full, float* local) const {
    for_each_run(t, tp_, tp_rank_, ep_rank_,
                 [&](size_t fi, size_t li, size_t n) { std::copy_n(full + fi, n, local + li); });
}

void ParamLayout::place_local(const ParamTensor& t, const float* local, float* full) const {
    for_each_run(t, tp_, tp_rank_, ep_rank_,
                 [&](size_t fi, size_t li, size_t n) { std::copy_n(local + li, n, full + fi); });
}

std::vector<TPRun> ParamLayout::local_runs(const ParamTensor& t, size_t l0, size_t l1) const {
    std::vector<TPRun> out;
    for_each_run(t, tp_, tp_rank_, ep_rank_, [&](size_t fi, size_t li, size_t n) {
        const size_t lo = std::max(li, l0), hi = std::min(li + n, l1);
        if (lo < hi) out.push_back({fi + (lo - li), lo, hi - lo});
    });
    return out;
}

void ParamLayout::cut_local_flat(const ParamLayout& full, const float* full_flat, float* local_flat) const {
    if (!full.whole() || !(full.config() == cfg_))
        throw std::invalid_argument("ParamLayout::cut_local_flat: the source layout must be the same model at tp = ep = 1");
    for (size_t i = 0; i < tensors_.size(); ++i)  // same tensor order at every tp
        cut_local(tensors_[i], full_flat + full.tensors()[i].offset, local_flat + tensors_[i].offset);
}

const ParamTensor* ParamLayout::find_role(int unit, TensorRole role) const {
    for (const ParamTensor& t : tensors_)
        if (t.unit == unit && t.role == role) return &t;
    return nullptr;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
    for (const ParamTensor& t : tensors_)
        if (t.name == name) return t;
    throw std::out_of_range("ParamLayout: no parameter tensor named '" + name + "'");
}

std::vector<FlatRange> ParamLayout::shard(int rank, int n) const {
    if (n < 1 || rank < 0 || rank >= n)
        throw std::invalid_argument("ParamLayout::shard: rank " + std::to_string(rank) + " outside a group of " +
                                    std::to_string(n));
    std::vector<FlatRange> out;
    for (size_t u = 0; u < units_.size(); ++u) {
        if (units_[u].numel % size_t(n) != 0)
            throw std::invalid_argument("ParamLayout::shard: unit " + std::to_string(u) + " of " +
                                        std::to_string(units_[u].numel) + " elements does not split over " +
                                        std::to_string(n) + " ranks (build the layout with shard_multiple " +
                                        std::to_string(n) + ")");
        const size_t c = units_[u].numel / size_t(n);
        out.push_back({units_[u].offset + size_t(rank) * c, c});
    }
    return out;
}

}  // namespace llmtrain
