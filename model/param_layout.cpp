// model/param_layout.cpp — builds the flat parameter layout of GPT-2 (see param_layout.hpp).
//
// Order inside a transformer unit: the four 2-D weights first (AdamW decays them), then the eight
// LayerNorm parameters and biases (no decay). Grouping by `decay` lets AdamW update a unit in two
// contiguous runs instead of twelve; checkpoints address tensors by name, so the order is free.
#include "model/param_layout.hpp"

#include <stdexcept>

namespace llmtrain {

namespace {

constexpr size_t kTensorAlign = 8;  // elements: 16 bytes in bf16, 32 in fp32

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

}  // namespace

ParamLayout::ParamLayout(const GPTConfig& cfg, int shard_multiple) : cfg_(cfg) {
    if (cfg.n_layer <= 0 || cfg.n_head <= 0 || cfg.n_embd <= 0 || cfg.seq_len <= 0 ||
        cfg.vocab_size <= 0)
        throw std::invalid_argument("GPTConfig: n_layer, n_head, n_embd, seq_len and vocab_size must be positive");
    if (cfg.n_embd % cfg.n_head != 0)
        throw std::invalid_argument("GPTConfig: n_embd (" + std::to_string(cfg.n_embd) +
                                    ") must be divisible by n_head (" + std::to_string(cfg.n_head) + ")");
    if (shard_multiple < 1)
        throw std::invalid_argument("ParamLayout: shard_multiple must be >= 1, got " +
                                    std::to_string(shard_multiple));
    const int64_t C = cfg.n_embd, Vp = cfg.padded_vocab_size(), maxT = cfg.seq_len;
    // Units are padded to a multiple of shard_multiple AND of the tensor alignment, so the next
    // unit's first tensor stays aligned; a multiple of lcm(...) is still a multiple of shard_multiple.
    size_t unit_multiple = static_cast<size_t>(shard_multiple);
    while (unit_multiple % kTensorAlign != 0) unit_multiple += shard_multiple;

    size_t pos = 0;
    int unit = 0;
    size_t unit_start = 0;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, bool decay) {
        ParamTensor t;
        t.name = name;
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

    add("wte", {Vp, C}, true);
    add("wpe", {maxT, C}, true);
    close_unit();
    for (int l = 0; l < cfg.n_layer; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        add(p + "attn.c_attn.weight", {3 * C, C}, true);
        add(p + "attn.c_proj.weight", {C, C}, true);
        add(p + "mlp.c_fc.weight", {4 * C, C}, true);
        add(p + "mlp.c_proj.weight", {C, 4 * C}, true);
        add(p + "ln_1.weight", {C}, false);
        add(p + "ln_1.bias", {C}, false);
        add(p + "attn.c_attn.bias", {3 * C}, false);
        add(p + "attn.c_proj.bias", {C}, false);
        add(p + "ln_2.weight", {C}, false);
        add(p + "ln_2.bias", {C}, false);
        add(p + "mlp.c_fc.bias", {4 * C}, false);
        add(p + "mlp.c_proj.bias", {C}, false);
        close_unit();
    }
    add("ln_f.weight", {C}, false);
    add("ln_f.bias", {C}, false);
    close_unit();
    total_ = pos;
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
