// model/param_layout.cpp — builds the flat parameter layout of GPT-2 (see param_layout.hpp).
//
// Order inside a transformer unit: the four 2-D weights first (AdamW decays them), then the eight
// LayerNorm parameters and biases (no decay). Grouping by `decay` lets AdamW update a unit in two
// contiguous runs instead of twelve; checkpoints address tensors by name, so the order is free.
// With tp > 1 every tensor is this TP rank's part (docs/design.md "Tensor parallelism"), in the
// same order: the order does not depend on tp.
#include "model/param_layout.hpp"

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
    : cfg_(cfg), tp_(tp), tp_rank_(tp_rank) {
    if (cfg.n_layer <= 0 || cfg.n_head <= 0 || cfg.n_embd <= 0 || cfg.seq_len <= 0 ||
        cfg.vocab_size <= 0)
        throw std::invalid_argument("GPTConfig: n_layer, n_head, n_embd, seq_len and vocab_size must be positive");
    if (cfg.n_embd % cfg.n_head != 0)
        throw std::invalid_argument("GPTConfig: n_embd (" + std::to_string(cfg.n_embd) +
                                    ") must be divisible by n_head (" + std::to_string(cfg.n_head) + ")");
    if (shard_multiple < 1)
        throw std::invalid_argument("ParamLayout: shard_multiple must be >= 1, got " +
                                    std::to_string(shard_multiple));
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
        throw std::invalid_argument("ParamLayout: tensor-parallel rank " + std::to_string(tp_rank) +
                                    " outside a group of parallel.tp = " + std::to_string(tp));
    auto need_divisible = [&](const char* what, int64_t v) {
        if (v % tp != 0)
            throw std::invalid_argument("parallel.tp = " + std::to_string(tp) + " must divide " + what + " (" +
                                        std::to_string(v) + ")");
    };
    need_divisible("n_head", cfg.n_head);
    need_divisible("4 * n_embd", 4 * int64_t(cfg.n_embd));
    need_divisible("the padded vocabulary Vp", cfg.padded_vocab_size());
    const int64_t C = cfg.n_embd, Vp = cfg.padded_vocab_size(), maxT = cfg.seq_len;
    // Units are padded to a multiple of shard_multiple AND of the tensor alignment, so the next
    // unit's first tensor stays aligned; a multiple of lcm(...) is still a multiple of shard_multiple.
    size_t unit_multiple = static_cast<size_t>(shard_multiple);
    while (unit_multiple % kTensorAlign != 0) unit_multiple += shard_multiple;

    size_t pos = 0;
    int unit = 0;
    size_t unit_start = 0;
    // full: the whole tensor's shape; split and blocks say how this rank's shape follows from it.
    auto add = [&](const std::string& name, std::vector<int64_t> full, bool decay,
                   TPSplit split = TPSplit::replicated, int blocks = 1) {
        ParamTensor t;
        t.name = name;
        t.full_shape = full;
        t.split = split;
        t.blocks = blocks;
        std::vector<int64_t> shape = full;
        if (split == TPSplit::column || split == TPSplit::vocab) shape[0] /= tp;
        if (split == TPSplit::row) shape[1] /= tp;
        t.numel = 1;
        for (int64_t d : shape) t.numel *= static_cast<size_t>(d);
        t.shape = std::move(shape);
        pos = round_up(pos, kTensorAlign);
        t.offset = pos;
        t.unit = unit;
        t.decay = decay;
        pos += t.numel;
        nparams_ += t.numel;
        tensors_.push_back(std::move(t));
    };
    auto close_unit = [&]() {
        pos = round_up(pos, unit_multiple);
        units_.push_back(ParamUnit{unit_start, pos - unit_start});
        unit_start = pos;
        ++unit;
    };

    add("wte", {Vp, C}, true, TPSplit::vocab);
    add("wpe", {maxT, C}, true);
    close_unit();
    for (int l = 0; l < cfg.n_layer; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        add(p + "attn.c_attn.weight", {3 * C, C}, true, TPSplit::column, 3);  // q|k|v, each by heads
        add(p + "attn.c_proj.weight", {C, C}, true, TPSplit::row);
        add(p + "mlp.c_fc.weight", {4 * C, C}, true, TPSplit::column);
        add(p + "mlp.c_proj.weight", {C, 4 * C}, true, TPSplit::row);
        add(p + "ln_1.weight", {C}, false);
        add(p + "ln_1.bias", {C}, false);
        add(p + "attn.c_attn.bias", {3 * C}, false, TPSplit::column, 3);
        add(p + "attn.c_proj.bias", {C}, false);  // added once, after the row-parallel sum
        add(p + "ln_2.weight", {C}, false);
        add(p + "ln_2.bias", {C}, false);
        add(p + "mlp.c_fc.bias", {4 * C}, false, TPSplit::column);
        add(p + "mlp.c_proj.bias", {C}, false);
        close_unit();
    }
    add("ln_f.weight", {C}, false);
    add("ln_f.bias", {C}, false);
    close_unit();
    total_ = pos;
}

namespace {

/// Calls f(full_index, local_index, count) for each contiguous run of t's local part inside the
/// full tensor (row-major); see TPSplit for which part rank r holds.
template <class F>
void for_each_run(const ParamTensor& t, int tp, int r, F f) {
    const size_t R = size_t(t.full_shape[0]);
    const size_t K = t.full_shape.size() > 1 ? size_t(t.full_shape[1]) : 1;
    switch (t.split) {
    case TPSplit::replicated:
        f(size_t(0), size_t(0), t.numel);
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
    for_each_run(t, tp_, tp_rank_, [&](size_t fi, size_t li, size_t n) { std::copy_n(full + fi, n, local + li); });
}

void ParamLayout::place_local(const ParamTensor& t, const float* local, float* full) const {
    for_each_run(t, tp_, tp_rank_, [&](size_t fi, size_t li, size_t n) { std::copy_n(local + li, n, full + fi); });
}

void ParamLayout::cut_local_flat(const ParamLayout& full, const float* full_flat, float* local_flat) const {
    const GPTConfig& a = full.config();
    if (full.tp() != 1 || a.n_layer != cfg_.n_layer || a.n_head != cfg_.n_head || a.n_embd != cfg_.n_embd ||
        a.seq_len != cfg_.seq_len || a.vocab_size != cfg_.vocab_size)
        throw std::invalid_argument("ParamLayout::cut_local_flat: the source layout must be the same model at tp = 1");
    for (size_t i = 0; i < tensors_.size(); ++i)  // same tensor order at every tp
        cut_local(tensors_[i], full_flat + full.tensors()[i].offset, local_flat + tensors_[i].offset);
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
