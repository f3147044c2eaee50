// tests/model/test_init_by_shard.cpp — GPT::init_params by shard (model/gpt_init.cpp): a rank that
// owns only some flat ranges (a ZeRO shard of a TP rank's local layout, ParamStore::own_ranges)
// gets exactly the values the whole tp = 1 init gives those elements.
//
// Reference: the whole model initialised by a GPT over a FullParamStore (tp 1), cut into the TP
// rank's layout by ParamLayout::cut_local_flat and into the ZeRO chunk by ParamLayout::shard —
// bit for bit, for GPT-2 and Llama (its vocab split's padded rows, its packed q|k|v), tp 1 and 2,
// ZeRO groups of 1 and 3.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "model/tensor_parallel.hpp"

using namespace llmtrain;

namespace {

/// A parameter store that owns `ranges` and keeps what load_shard() gives it; nothing else is used.
class CaptureStore final : public ParamStore {
public:
    std::vector<FlatRange> ranges;
    std::vector<float> got;
    const void* acquire_params(int, int) override { throw std::logic_error("unused"); }
    void release_params(int) override {}
    void* acquire_grads(int) override { throw std::logic_error("unused"); }
    void grads_done(int) override {}
    void load_params(const float*) override { throw std::logic_error("unused"); }
    std::vector<FlatRange> own_ranges() const override { return ranges; }
    void load_shard(const float* values) override {
        size_t n = 0;
        for (const FlatRange& r : ranges) n += r.numel;
        got.assign(values, values + n);
    }
};

/// A TP group of `size` as seen from `rank`, for the layout only: init makes no collective.
class NoTp final : public TensorParallel {
public:
    NoTp(int rank, int size) : rank_(rank), size_(size) {}
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void all_reduce(void*, size_t, DType) override { throw std::logic_error("unused"); }
    void all_gather(void*, const void*, size_t, DType) override { throw std::logic_error("unused"); }
    void reduce_scatter(void*, const void*, size_t, DType) override { throw std::logic_error("unused"); }

private:
    int rank_, size_;
};

void check(const GPTConfig& cfg) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = 1;
    o.T = 8;
    GPT whole(cfg, o, alloc);
    whole.init_params(42);
    const ParamLayout& full = whole.layout();
    const float* w = static_cast<const float*>(whole.store().acquire_params(0, -1));  // the flat buffer (CPU: host)
    for (int tp : {1, 2})
        for (int t = 0; t < tp; ++t)
            for (int N : {1, 3})
                for (int z = 0; z < N; ++z) {
                    SCOPED_TRACE("tp " + std::to_string(tp) + " rank " + std::to_string(t) + ", ZeRO " +
                                 std::to_string(N) + " index " + std::to_string(z));
                    NoTp group(t, tp);
                    GPTOptions so = o;
                    so.shard_multiple = N > 1 ? 8 * N : 1;
                    so.tp = tp > 1 ? &group : nullptr;
                    CaptureStore store;
                    GPT part(cfg, so, alloc, &store);
                    const ParamLayout& lay = part.layout();
                    store.ranges = lay.shard(z, N);
                    part.init_params(42);
                    std::vector<float> local(lay.total_numel(), 0.0f), want;
                    lay.cut_local_flat(full, w, local.data());
                    for (const FlatRange& r : store.ranges)
                        want.insert(want.end(), local.begin() + long(r.offset), local.begin() + long(r.offset + r.numel));
                    ASSERT_EQ(store.got.size(), want.size());
                    for (size_t i = 0; i < want.size(); ++i)
                        ASSERT_EQ(std::memcmp(&want[i], &store.got[i], 4), 0) << "element " << i << " of the shard";
                }
}

}  // namespace

TEST(InitByShard, Gpt2ShardsAreTheWholeInitsElements) {
    GPTConfig c;
    c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.seq_len = 8, c.vocab_size = 200;
    check(c);
}

TEST(InitByShard, LlamaShardsAreTheWholeInitsElements) {
    GPTConfig c;
    c.arch = Arch::llama;
    c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 32, c.seq_len = 8, c.vocab_size = 200;
    c.intermediate_size = 64, c.tie_embeddings = false;
    check(c);
}
