// model/cuda/cuda_ops_encoder.cu — CudaOps (cuda_ops.hpp), the embedding: encoder forward and
// backward, whole-vocab and vocab-parallel, and the backward's token buckets. The buckets (positions
// grouped by token, so the backward is deterministic without atomics: encoder.cu) are built on the
// host, from the caller's ids (encoder_host_tokens) or from a pinned copy the forward starts; one
// slot per token buffer (token_slot_for) lets micro-batches in flight each find their own, and the
// upload alternates between kBucketBuffers pinned + device pairs.

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "model/cuda/cuda_ops.hpp"
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

void CudaOps::encoder_host_tokens(const int* dev, const int* host, int n) {
    TokenSlot& c = token_slot_for(dev, n);
    c.nb = cuda::build_encoder_buckets(host, n, c.packed);
    c.hinted = true;
}

void CudaOps::encoder_forward(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C) {
    encoder_forward_range(out, inp, wte, wpe, B, T, C, 0, INT_MAX);
}

void CudaOps::encoder_backward(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C) {
    encoder_backward_range(dwte, dwpe, dout, inp, B, T, C, 0, INT_MAX);
}

void CudaOps::encoder_forward_vocab(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                                    int v0, int nv) {
    require_vocab_range(v0, nv, "encoder_forward_vocab");
    encoder_forward_range(out, inp, wte, wpe, B, T, C, v0, nv);
}

void CudaOps::encoder_backward_vocab(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                     int v0, int nv) {
    require_vocab_range(v0, nv, "encoder_backward_vocab");
    encoder_backward_range(dwte, dwpe, dout, inp, B, T, C, v0, nv);
}

void CudaOps::encoder_forward_pos(void* out, const int* inp, const int* pos, const void* wte, const void* wpe, int B,
                                  int T, int C, int v0, int nv) {
    require_vocab_range(v0, nv, "encoder_forward_pos");
    encoder_forward_range(out, inp, wte, wpe, B, T, C, v0, nv, pos);
}

void CudaOps::encoder_backward_pos(void* dwte, void* dwpe, const void* dout, const int* inp, const int* pos, int B,
                                   int T, int C, int v0, int nv) {
    require_vocab_range(v0, nv, "encoder_backward_pos");
    encoder_backward_range(dwte, nullptr, dout, inp, B, T, C, v0, nv);
    if (dwpe == nullptr || pos == nullptr) return;
    // dwpe's rows: the positions' ids, any row of wpe (context parallelism's reach past this call's T)
    encoder_backward_range(dwpe, nullptr, dout, pos, B, T, C, 0, INT_MAX);
}

void CudaOps::require_vocab_range(int v0, int nv, const char* op) {
    if (v0 < 0 || nv < 1)
        throw std::invalid_argument(std::string("cuda ") + op + ": expected a vocab slice v0 >= 0, nv >= 1, got v0 " +
                                    std::to_string(v0) + ", nv " + std::to_string(nv));
}

void CudaOps::encoder_forward_range(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                                    int v0, int nv, const int* pos) {
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::encoder_forward(as<X>(out), inp, as<X>(wte), as<X>(wpe), B, T, C, v0, nv, stream_, pos);
    });
    note_forward_ids(inp, B * T);
    if (pos != nullptr && wpe != nullptr) note_forward_ids(pos, B * T);
}

void CudaOps::note_forward_ids(const int* ids, int N) {
    const int* inp = ids;
    TokenSlot& c = token_slot_for(inp, N);
    c.have_buckets = c.hinted;
    c.copy_started = !c.hinted;
    c.hinted = false;
    if (c.have_buckets) return;
    ensure_pinned_ids(c);
    CUDA_CHECK(cudaMemcpyAsync(c.host, inp, sizeof(int) * N, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaEventRecord(c.ready, stream_));
}

void CudaOps::encoder_backward_range(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                     int v0, int nv) {
    const int N = B * T;
    auto it = std::find_if(token_slots_.begin(), token_slots_.end(),
                           [&](const TokenSlot& c) { return c.src == inp && c.n == N; });
    TokenSlot* found = it != token_slots_.end() ? &*it : nullptr;
    if (found == nullptr || !found->have_buckets) {
        TokenSlot& c = found != nullptr ? *found : token_slot_for(inp, N);
        if (!c.copy_started) {
            ensure_pinned_ids(c);
            CUDA_CHECK(cudaMemcpyAsync(c.host, inp, sizeof(int) * N, cudaMemcpyDeviceToHost, stream_));
            CUDA_CHECK(cudaStreamSynchronize(stream_));
        } else {
            host_wait_event(c.ready, "the encoder backward's copy of its token ids");  // timed in a pipeline
        }
        c.nb = cuda::build_encoder_buckets(c.host, N, c.packed);
        c.have_buckets = true;
        found = &c;
    }
    const TokenSlot& c = *found;
    ensure_buckets(3 * size_t(N) + 1);  // the most any N ids need: never regrown (no cudaFree mid-step)
    BucketBuffer& b = buckets_[next_bucket_];
    next_bucket_ = (next_bucket_ + 1) % kBucketBuffers;
    host_wait_event(b.done, "the encoder backward's bucket buffer");  // the pair's previous upload has left it
    std::copy(c.packed.begin(), c.packed.end(), b.host);
    CUDA_CHECK(cudaStreamWaitEvent(stream_, b.done, 0));  // ... and its kernels the device buffer
    CUDA_CHECK(cudaMemcpyAsync(b.dev, b.host, sizeof(int) * c.packed.size(), cudaMemcpyHostToDevice, stream_));
    const int nb = c.nb;
    // Buckets are in ascending token order: those in [v0, v0 + nv) are the run [k0, k1).
    const int* tok = c.packed.data();
    const int k0 = static_cast<int>(std::lower_bound(tok, tok + nb, v0) - tok);
    const int k1 = static_cast<int>(
        std::lower_bound(tok, tok + nb, static_cast<int64_t>(v0) + nv,
                         [](int token, int64_t end) { return static_cast<int64_t>(token) < end; }) -
        tok);
    const cuda::EncoderBuckets buckets{b.dev + k0, b.dev + nb + k0, b.dev + 2 * nb + 1, k1 - k0, v0};
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::encoder_backward(as<X>(dwte), as<X>(dwpe), as<X>(dout), buckets, B, T, C, stream_);
    });
    CUDA_CHECK(cudaEventRecord(b.done, stream_));
}

void CudaOps::ensure_buckets(size_t ints) {
    if (bucket_ints_ >= ints) return;
    for (BucketBuffer& b : buckets_) {
        CUDA_CHECK(cudaEventSynchronize(b.done));
        internal_free(b.dev, sizeof(int) * bucket_ints_);
        CUDA_CHECK(cudaFreeHost(b.host));
        b.dev = static_cast<int*>(internal_malloc(sizeof(int) * ints));
        CUDA_CHECK(cudaMallocHost(&b.host, sizeof(int) * ints));
    }
    bucket_ints_ = ints;
}

CudaOps::TokenSlot& CudaOps::token_slot_for(const int* src, int n) {
    auto it = std::find_if(token_slots_.begin(), token_slots_.end(), [&](const TokenSlot& c) { return c.src == src; });
    if (it == token_slots_.end() && token_slots_.size() < kTokenSlots) {
        TokenSlot c;
        CUDA_CHECK(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming));
        token_slots_.push_back(c);
        it = token_slots_.end() - 1;
    } else if (it == token_slots_.end()) {
        it = std::min_element(token_slots_.begin(), token_slots_.end(),
                              [](const TokenSlot& a, const TokenSlot& b) { return a.written < b.written; });
    }
    if (it->src != src || it->n != n) it->hinted = it->have_buckets = it->copy_started = false;
    it->src = src;
    it->n = n;
    it->written = ++token_clock_;
    return *it;
}

void CudaOps::ensure_pinned_ids(TokenSlot& c) {
    if (c.cap >= c.n) return;
    CUDA_CHECK(cudaEventSynchronize(c.ready));
    CUDA_CHECK(cudaFreeHost(c.host));
    c.host = nullptr;
    CUDA_CHECK(cudaMallocHost(&c.host, sizeof(int) * c.n));
    c.cap = c.n;
}

}  // namespace llmtrain::cuda
