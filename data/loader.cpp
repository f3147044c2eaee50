// data/loader.cpp — DataLoader: micro-batches read one ahead by a background I/O thread.
//
// The I/O thread owns the datasets, every source's shards (HDF5 is touched by that thread only): it
// opens and checks them, then keeps one batch ready, read with one call per source (per shard). The consumer side (next, state, restore) and the thread
// meet under one mutex. `generation` counts restores: a batch read for an older generation is
// discarded, so restore() is exact even while a read is in flight. A failed read is handed to
// next(), which rethrows it without advancing; the position stays where it was.
#include "data/loader.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "data/mixture.hpp"
#include "data/sharded_dataset.hpp"
#include "data/window_order.hpp"

namespace llmtrain {

namespace {

// FNV-1a 64 of a source's name: its stream's seed is the run seed xor this, so reordering the
// sources keeps each one's order of windows.
uint64_t fnv1a64(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

}  // namespace

struct DataLoader::Impl {
    // A stream position with every source's counters (one source for a path: position = sample).
    struct Cursor {
        uint64_t sample = 0, seed = 0;
        std::vector<uint64_t> position, drawn;
    };

    LoaderOptions opt;
    std::vector<SourceSpec> specs;      // the mixture's sources, or the one path
    bool mixture = false;
    std::unique_ptr<MixtureDraw> draw;  // a mixture's
    std::vector<DatasetInfo> infos;     // written by the I/O thread before the constructor returns
    std::vector<uint64_t> n_windows;    // each source's windows
    uint64_t n_batches = 0;             // batches_per_epoch()
    std::thread io;

    std::mutex m;               // guards everything below
    std::condition_variable cv;
    bool opened = false, stop = false;
    std::exception_ptr open_error;
    Cursor cursor;              // stream position of the micro-batch next() returns
    Cursor produce;             // stream position the I/O thread reads next
    Cursor after_batch;         // the position after the ready batch
    uint64_t generation = 0;
    bool have_batch = false;
    std::vector<int32_t> batch;  // (B, T+1) tokens of the ready batch
    std::exception_ptr batch_error;

    // "data source 'web' (path)" or the path, for messages.
    std::string what(size_t k) const {
        return mixture ? "data source '" + specs[k].name + "' (" + specs[k].path + ")" : specs[k].path;
    }
    uint64_t source_seed(size_t k, uint64_t seed) const { return mixture ? seed ^ fnv1a64(specs[k].name) : seed; }

    // Every rank's micro-batch moves the stream on by B*world samples (data/window_order.hpp): walks
    // them in order, each to the source the draw picks, and lists this rank's B as (source, index
    // in that source's stream). Returns the position after them.
    Cursor plan(Cursor c, std::vector<std::pair<size_t, uint64_t>>* mine) const {
        const uint64_t chunk = static_cast<uint64_t>(opt.B) * static_cast<uint64_t>(opt.world);
        const uint64_t lo = first_sample_of(0, 0, opt.B, opt.rank, opt.world), hi = lo + uint64_t(opt.B);
        for (uint64_t j = 0; j < chunk; ++j) {
            const size_t k = draw ? draw->pick(c.drawn) : 0;
            if (mine && j >= lo && j < hi) mine->emplace_back(k, c.position[k]);
            ++c.position[k];
            ++c.drawn[k];
        }
        c.sample += chunk;
        return c;
    }
    Cursor from_state(const LoaderState& s) const;
    LoaderState to_state(const Cursor& c) const;
    void open_and_check(std::vector<std::unique_ptr<ShardedDataset>>& ds, std::vector<WindowOrder>& order);
    void run();
};

DataLoader::Impl::Cursor DataLoader::Impl::from_state(const LoaderState& s) const {
    Cursor c{s.sample, s.seed, std::vector<uint64_t>(specs.size(), 0), std::vector<uint64_t>(specs.size(), 0)};
    if (!mixture) {
        c.position[0] = c.drawn[0] = s.sample;
        return c;
    }
    bool same_draw = s.sources.size() == specs.size();
    for (size_t k = 0; k < specs.size(); ++k) {
        const SourceState* saved = nullptr;
        for (const SourceState& ss : s.sources)
            if (ss.name == specs[k].name) saved = &ss;
        if (saved) c.position[k] = saved->position;
        same_draw = same_draw && s.sources[k].name == specs[k].name && s.sources[k].weight == specs[k].weight;
    }
    if (same_draw)
        for (size_t k = 0; k < specs.size(); ++k) c.drawn[k] = s.sources[k].drawn;
    return c;
}

LoaderState DataLoader::Impl::to_state(const Cursor& c) const {
    LoaderState s{c.sample, c.seed, {}};
    if (mixture)
        for (size_t k = 0; k < specs.size(); ++k)
            s.sources.push_back(SourceState{specs[k].name, specs[k].weight, c.position[k], c.drawn[k]});
    return s;
}

void DataLoader::Impl::open_and_check(std::vector<std::unique_ptr<ShardedDataset>>& ds,
                                      std::vector<WindowOrder>& order) {
    for (size_t k = 0; k < specs.size(); ++k) {
        ds.push_back(std::make_unique<ShardedDataset>(specs[k].path));
        const DatasetInfo& di = ds.back()->info();
        if (opt.vocab_size > 0 && di.vocab_size > opt.vocab_size)
            throw DataError(what(k) + ": dataset vocab_size " + std::to_string(di.vocab_size) +
                            " exceeds the model's vocab_size " + std::to_string(opt.vocab_size));
        if (!opt.expect_tokenizer_sha256.empty() && opt.expect_tokenizer_sha256 != di.tokenizer_sha256)
            throw DataError(what(k) + ": tokenizer_sha256 " + di.tokenizer_sha256 + " differs from the expected " +
                            opt.expect_tokenizer_sha256 + " (dataset made with another tokenizer)");
        if (k > 0 && di.tokenizer_sha256 != ds[0]->info().tokenizer_sha256)
            throw DataError(what(k) + ": tokenizer_sha256 " + di.tokenizer_sha256 + " differs from " + what(0) +
                            "'s " + ds[0]->info().tokenizer_sha256 + " (every source must use the same tokenizer)");
        // Window w covers [w*T, w*T + T + 1), so it needs w*T + T + 1 <= n_tokens.
        const uint64_t n = di.n_tokens == 0 ? 0 : (di.n_tokens - 1) / opt.T;
        const uint64_t need = mixture ? 1 : static_cast<uint64_t>(opt.B) * opt.world;
        if (n < need)
            throw DataError(what(k) + ": " + std::to_string(di.n_tokens) + " tokens give " + std::to_string(n) +
                            " windows of seq_len " + std::to_string(opt.T) +
                            (mixture ? ", none" : ", fewer than B*world = " + std::to_string(need)));
        order.emplace_back(n, opt.shuffle);
    }
}

void DataLoader::Impl::run() {
    std::vector<std::unique_ptr<ShardedDataset>> ds;
    std::vector<WindowOrder> order;
    try {
        open_and_check(ds, order);
    } catch (...) {
        std::lock_guard<std::mutex> lk(m);
        open_error = std::current_exception();
        opened = true;
        cv.notify_all();
        return;
    }
    {
        std::lock_guard<std::mutex> lk(m);
        uint64_t total = 0;
        for (const auto& d : ds) {
            infos.push_back(d->info());
            n_windows.push_back((d->info().n_tokens - 1) / opt.T);  // >= 1: checked above
            total += n_windows.back();
        }
        n_batches = total / (static_cast<uint64_t>(opt.B) * static_cast<uint64_t>(opt.world));
        opened = true;
    }
    cv.notify_all();

    const int len = opt.T + 1;
    std::vector<int32_t> buf, tmp;
    std::vector<std::pair<size_t, uint64_t>> mine;
    std::vector<uint64_t> starts;
    std::vector<int> rows;
    std::unique_lock<std::mutex> lk(m);
    while (true) {
        cv.wait(lk, [&] { return stop || !have_batch; });
        if (stop) break;
        const Cursor pos = produce;
        const uint64_t gen = generation;
        lk.unlock();
        std::exception_ptr err;
        Cursor after;
        try {
            mine.clear();
            after = plan(pos, &mine);
            buf.resize(static_cast<size_t>(opt.B) * len);
            for (size_t k = 0; k < ds.size(); ++k) {  // one read per source (per shard) of its windows
                starts.clear();
                rows.clear();
                for (int i = 0; i < opt.B; ++i)
                    if (mine[i].first == k) {
                        starts.push_back(order[k].window(source_seed(k, pos.seed), mine[i].second) * opt.T);
                        rows.push_back(i);
                    }
                if (starts.empty()) continue;
                if (int(starts.size()) == opt.B) {  // the whole batch from this source: straight into buf
                    ds[k]->read_windows(starts, len, buf.data(), infos[k].vocab_size);
                    continue;
                }
                tmp.resize(starts.size() * len);
                ds[k]->read_windows(starts, len, tmp.data(), infos[k].vocab_size);
                for (size_t j = 0; j < rows.size(); ++j)
                    std::copy_n(tmp.data() + j * len, len, buf.data() + size_t(rows[j]) * len);
            }
        } catch (...) {
            err = std::current_exception();
        }
        lk.lock();
        if (gen != generation) continue;  // restored while reading: this batch is stale
        batch.swap(buf);
        batch_error = err;
        have_batch = true;
        if (!err) produce = after_batch = after;
        cv.notify_all();
    }
    lk.unlock();
    ds.clear();  // close HDF5 on this thread
}

DataLoader::DataLoader(const LoaderOptions& opt) : impl_(std::make_unique<Impl>()) {
    if (opt.B < 1 || opt.T < 1)
        throw DataError(opt.path + ": loader needs B >= 1 and T >= 1, got B=" + std::to_string(opt.B) +
                        " T=" + std::to_string(opt.T));
    if (opt.world < 1 || opt.rank < 0 || opt.rank >= opt.world)
        throw DataError(opt.path + ": loader rank " + std::to_string(opt.rank) + " is outside world " +
                        std::to_string(opt.world));
    Impl& d = *impl_;
    d.opt = opt;
    d.mixture = !opt.sources.empty();
    d.specs = d.mixture ? opt.sources : std::vector<SourceSpec>{SourceSpec{"", opt.path, 1}};
    if (d.mixture) {
        std::vector<double> w;
        for (size_t k = 0; k < opt.sources.size(); ++k) {
            for (size_t j = 0; j < k; ++j)
                if (opt.sources[j].name == opt.sources[k].name)
                    throw DataError(d.what(k) + ": a second source named '" + opt.sources[k].name + "'");
            if (!(opt.sources[k].weight > 0) || !std::isfinite(opt.sources[k].weight))
                throw DataError(d.what(k) + ": weight must be > 0, got " + std::to_string(opt.sources[k].weight));
            w.push_back(opt.sources[k].weight);
        }
        d.draw = std::make_unique<MixtureDraw>(w);
    }
    d.cursor = d.produce = d.from_state(LoaderState{0, opt.seed, {}});
    d.io = std::thread([&d] { d.run(); });
    std::unique_lock<std::mutex> lk(d.m);
    d.cv.wait(lk, [&] { return d.opened; });
    if (d.open_error) {
        std::exception_ptr err = d.open_error;
        lk.unlock();
        d.io.join();
        std::rethrow_exception(err);
    }
}

DataLoader::~DataLoader() {
    {
        std::lock_guard<std::mutex> lk(impl_->m);
        impl_->stop = true;
    }
    impl_->cv.notify_all();
    if (impl_->io.joinable()) impl_->io.join();
}

const DatasetInfo& DataLoader::info() const { return impl_->infos[0]; }

const std::vector<DatasetInfo>& DataLoader::source_info() const { return impl_->infos; }

uint64_t DataLoader::batches_per_epoch() const { return impl_->n_batches; }

void DataLoader::next(int32_t* inputs, int32_t* targets) {
    Impl& d = *impl_;
    const int B = d.opt.B, T = d.opt.T;
    std::unique_lock<std::mutex> lk(d.m);
    d.cv.wait(lk, [&] { return d.have_batch; });
    d.have_batch = false;
    if (d.batch_error) {
        std::exception_ptr err = d.batch_error;
        d.batch_error = nullptr;
        lk.unlock();
        d.cv.notify_all();
        std::rethrow_exception(err);
    }
    // (B, T+1) windows -> inputs (B, T) = tokens [0, T), targets (B, T) = tokens [1, T+1).
    for (int b = 0; b < B; ++b) {
        const int32_t* w = d.batch.data() + static_cast<size_t>(b) * (T + 1);
        std::copy_n(w, T, inputs + static_cast<size_t>(b) * T);
        std::copy_n(w + 1, T, targets + static_cast<size_t>(b) * T);
    }
    d.cursor = d.after_batch;
    lk.unlock();
    d.cv.notify_all();
}

LoaderState DataLoader::state() const {
    std::lock_guard<std::mutex> lk(impl_->m);
    return impl_->to_state(impl_->cursor);
}

void DataLoader::restore(const LoaderState& s) {
    Impl& d = *impl_;
    {
        std::lock_guard<std::mutex> lk(d.m);
        ++d.generation;
        d.have_batch = false;
        d.batch_error = nullptr;
        d.cursor = d.produce = d.from_state(s);
    }
    d.cv.notify_all();
}

LoaderState DataLoader::legacy_position(uint64_t epoch, uint64_t batch) const {
    const Impl& d = *impl_;
    return LoaderState{epoch * d.n_windows[0] + batch * static_cast<uint64_t>(d.opt.B) * static_cast<uint64_t>(d.opt.world),
                       d.opt.seed, {}};
}

}  // namespace llmtrain
