// tools/bench/document_blocks.cpp — how much of causal attention document masking leaves to do on a
// dataset's windows (docs/attention.md "Document masking"): reads training micro-batches as the
// trainer does (data/loader.hpp: shuffled windows of T + 1 tokens, B a micro-batch), cuts them into
// documents at the file's eos_id (model/documents.hpp) and counts FlashAttention-2's tiles: forward
// key blocks (128 query rows x 64 keys, flash_forward.cu) and backward query steps (128 keys x 64
// rows, the small tile the masked backward runs at head size 64, flash_backward.cu), causal against
// masked; also the fraction of (query, key) scores inside documents. Host only: it runs no kernel.
//
//   document_blocks FILE.h5 [T=1024] [micro_batches=64] [B=8]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "data/loader.hpp"
#include "model/documents.hpp"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s FILE.h5 [T=1024] [micro_batches=64] [B=8]\n", argv[0]);
        return 2;
    }
    using namespace llmtrain;
    LoaderOptions lo;
    lo.path = argv[1];
    lo.T = argc > 2 ? std::atoi(argv[2]) : 1024;
    const int n = argc > 3 ? std::atoi(argv[3]) : 64;
    lo.B = argc > 4 ? std::atoi(argv[4]) : 8;
    lo.vocab_size = 1 << 30;
    DataLoader loader(lo);
    const int eos = loader.info().eos_id, B = lo.B, T = lo.T;
    std::vector<int32_t> in(size_t(B) * T), tgt(in.size()), ds(in.size());
    BlockCounts fwd, bwd;
    double scores_causal = 0, scores_doc = 0, docs = 0;
    for (int m = 0; m < n; ++m) {
        loader.next(in.data(), tgt.data());
        document_starts(in.data(), eos, B, T, ds.data(), nullptr);
        const BlockCounts f = document_block_counts(ds.data(), B, T, 128, 64);
        const BlockCounts g = document_backward_counts(ds.data(), B, T, 128, 64);
        fwd.causal += f.causal, fwd.visited += f.visited, bwd.causal += g.causal, bwd.visited += g.visited;
        for (size_t i = 0; i < ds.size(); ++i) {
            const int t = int(i % size_t(T));
            scores_causal += t + 1;
            scores_doc += t - ds[i] + 1;
            docs += ds[i] == t;
        }
    }
    std::printf("%s: %d micro-batches of %d x %d tokens, eos id %d, %.2f documents per window (parts included)\n",
                lo.path.c_str(), n, B, T, eos, docs / (double(n) * B));
    std::printf("scores inside documents: %.1f%% of causal\n", 100.0 * scores_doc / scores_causal);
    std::printf("forward key blocks (128 x 64): %llu of %llu visited, %.1f%% skipped\n",
                static_cast<unsigned long long>(fwd.visited), static_cast<unsigned long long>(fwd.causal),
                100.0 * double(fwd.causal - fwd.visited) / double(fwd.causal));
    std::printf("backward query steps (128 keys x 64 rows): %llu of %llu walked, %.1f%% skipped\n",
                static_cast<unsigned long long>(bwd.visited), static_cast<unsigned long long>(bwd.causal),
                100.0 * double(bwd.causal - bwd.visited) / double(bwd.causal));
    return 0;
}
