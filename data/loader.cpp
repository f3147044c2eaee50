// data/loader.cpp — DataLoader: micro-batches read one ahead by a background I/O thread.
//
// The I/O thread owns the TokenDataset (HDF5 is touched by that thread only): it opens and checks
// the file, then keeps one batch ready. The consumer side (next, state, restore) and the thread
// meet under one mutex. `generation` counts restores: a batch read for an older generation is
// discarded, so restore() is exact even while a read is in flight. A failed read is handed to
// next(), which rethrows it without advancing; the position stays where it was.
#include "data/loader.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "data/window_order.hpp"

namespace llmtrain {

struct DataLoader::Impl {
    LoaderOptions opt;
    DatasetInfo info;           // written by the I/O thread before the constructor returns
    uint64_t n_windows = 0, n_batches = 0;  // windows in the file; batches_per_epoch()
    std::thread io;

    std::mutex m;               // guards everything below
    std::condition_variable cv;
    bool opened = false, stop = false;
    std::exception_ptr open_error;
    LoaderState cursor;         // stream position of the micro-batch next() returns
    LoaderState produce;        // stream position the I/O thread reads next
    uint64_t generation = 0;
    bool have_batch = false;
    std::vector<int32_t> batch;  // (B, T+1) tokens of the ready batch
    std::exception_ptr batch_error;

    // Every rank's micro-batch moves the stream on by B*world samples (data/window_order.hpp).
    LoaderState advance(LoaderState s) const {
        s.sample += static_cast<uint64_t>(opt.B) * static_cast<uint64_t>(opt.world);
        return s;
    }
    void open_and_check(std::unique_ptr<TokenDataset>& ds, std::unique_ptr<WindowOrder>& order);
    void run();
};

void DataLoader::Impl::open_and_check(std::unique_ptr<TokenDataset>& ds, std::unique_ptr<WindowOrder>& order) {
    ds = std::make_unique<TokenDataset>(opt.path);
    const DatasetInfo& di = ds->info();
    if (opt.vocab_size > 0 && di.vocab_size > opt.vocab_size)
        throw DataError(opt.path + ": dataset vocab_size " + std::to_string(di.vocab_size) +
                        " exceeds the model's vocab_size " + std::to_string(opt.vocab_size));
    if (!opt.expect_tokenizer_sha256.empty() && opt.expect_tokenizer_sha256 != di.tokenizer_sha256)
        throw DataError(opt.path + ": tokenizer_sha256 " + di.tokenizer_sha256 + " differs from the expected " +
                        opt.expect_tokenizer_sha256 + " (dataset made with another tokenizer)");
    // Window w covers [w*T, w*T + T + 1), so it needs w*T + T + 1 <= n_tokens.
    const uint64_t n_windows = di.n_tokens == 0 ? 0 : (di.n_tokens - 1) / opt.T;
    const uint64_t need = static_cast<uint64_t>(opt.B) * opt.world;
    if (n_windows < need)
        throw DataError(opt.path + ": " + std::to_string(di.n_tokens) + " tokens give " + std::to_string(n_windows) +
                        " windows of seq_len " + std::to_string(opt.T) + ", fewer than B*world = " +
                        std::to_string(need));
    order = std::make_unique<WindowOrder>(n_windows, opt.shuffle);
}

void DataLoader::Impl::run() {
    std::unique_ptr<TokenDataset> ds;
    std::unique_ptr<WindowOrder> order;
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
        info = ds->info();
        n_windows = (info.n_tokens - 1) / opt.T;  // >= B*world >= 1: checked above
        n_batches = n_windows / (static_cast<uint64_t>(opt.B) * static_cast<uint64_t>(opt.world));
        opened = true;
    }
    cv.notify_all();

    const int len = opt.T + 1;
    std::vector<int32_t> buf;
    std::vector<uint64_t> starts(opt.B);
    std::unique_lock<std::mutex> lk(m);
    while (true) {
        cv.wait(lk, [&] { return stop || !have_batch; });
        if (stop) break;
        const LoaderState pos = produce;
        const uint64_t gen = generation;
        lk.unlock();
        std::exception_ptr err;
        try {
            const uint64_t first = first_sample_of(pos.sample, 0, opt.B, opt.rank, opt.world);
            for (int i = 0; i < opt.B; ++i) starts[i] = order->window(pos.seed, first + i) * opt.T;
            buf.resize(static_cast<size_t>(opt.B) * len);
            ds->read_windows(starts, len, buf.data(), info.vocab_size);
        } catch (...) {
            err = std::current_exception();
        }
        lk.lock();
        if (gen != generation) continue;  // restored while reading: this batch is stale
        batch.swap(buf);
        batch_error = err;
        have_batch = true;
        if (!err) produce = advance(pos);
        cv.notify_all();
    }
    lk.unlock();
    ds.reset();  // close HDF5 on this thread
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
    d.cursor = d.produce = LoaderState{0, opt.seed};
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

const DatasetInfo& DataLoader::info() const { return impl_->info; }

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
    d.cursor = d.advance(d.cursor);
    lk.unlock();
    d.cv.notify_all();
}

LoaderState DataLoader::state() const {
    std::lock_guard<std::mutex> lk(impl_->m);
    return impl_->cursor;
}

void DataLoader::restore(const LoaderState& s) {
    Impl& d = *impl_;
    {
        std::lock_guard<std::mutex> lk(d.m);
        ++d.generation;
        d.have_batch = false;
        d.batch_error = nullptr;
        d.cursor = d.produce = s;
    }
    d.cv.notify_all();
}

LoaderState DataLoader::legacy_position(uint64_t epoch, uint64_t batch) const {
    const Impl& d = *impl_;
    return LoaderState{epoch * d.n_windows + batch * static_cast<uint64_t>(d.opt.B) * static_cast<uint64_t>(d.opt.world),
                       d.opt.seed};
}

}  // namespace llmtrain
