// model/gpt_documents.cpp — documents inside packed windows for the GPT (GPTOptions::doc_mask,
// doc_positions; docs/attention.md "Document masking"): each activation context's doc_start (the
// window's, (B,Tw)) and positions restarted at each document (its rows', (B,T)), built on the host
// from the window's token ids (model/documents.hpp) and copied to the context. Every stage of a
// pipeline and every CP rank holds the whole windows, so each builds them itself.
#include <stdexcept>
#include <string>
#include <vector>

#include "model/documents.hpp"
#include "model/gpt_impl.hpp"

namespace llmtrain {

void GPT::Impl::window_documents(Context& c, const int* window) {
    const int B = opt.B;
    const size_t N = n_rows(), Nw = static_cast<size_t>(B) * Tw;
    doc_host.resize(2 * Nw + N);
    int* ds = doc_host.data();
    int* wpos = ds + Nw;
    int* pos = wpos + Nw;
    document_starts(window, opt.doc_eos, B, Tw, ds, wpos);
    if (c.doc_start != nullptr) ops.memcpy_h2d(c.doc_start, ds, Nw * 4);  // pageable: staged at the call
    c.docs_set = true;
    if (!opt.doc_positions) return;  // with cp c.pos: the rows' window positions (GPT::forward)
    take_rows(wpos, pos);
    ops.memcpy_h2d(c.pos, pos, N * 4);
    // Learned positions: the embedding backward groups positions by their id as it does tokens (CUDA
    // buckets them on the host): the host's ids spare it a copy back (Ops::encoder_host_tokens).
    if (first && wpe != kNoTensor) ops.encoder_host_tokens(c.pos, pos, static_cast<int>(N));
}

void GPT::Impl::forward_documents(Context& c, int ctx, const int* tokens, const int* host_tokens) {
    if (!opt.doc_mask && !opt.doc_positions) return;
    if (c.docs_set) {  // GPT::set_documents (or cp_take) gave this forward its documents
        c.docs_set = false;
        return;
    }
    if (!first || cpg != nullptr)
        throw std::logic_error("GPT::forward: context " + std::to_string(ctx) + " has no documents: call "
                               "GPT::set_documents with the micro-batch's windows first (only the first stage "
                               "without context parallelism finds them from its token ids)");
    const int* ids = host_tokens;
    std::vector<int> back;
    if (ids == nullptr) {  // no host copy given: read the ids back (a host wait)
        back.resize(n_rows());
        ops.memcpy_d2h(back.data(), tokens, back.size() * 4);
        ops.synchronize();
        ids = back.data();
    }
    window_documents(c, ids);  // without cp the rows are the window
    c.docs_set = false;
}

void GPT::set_documents(const int* window, int ctx) {
    Impl& m = *impl_;
    Context& c = m.context(ctx);
    if (m.opt.doc_mask || m.opt.doc_positions) m.window_documents(c, window);
}

}  // namespace llmtrain
