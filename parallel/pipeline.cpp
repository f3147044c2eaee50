// parallel/pipeline.cpp — one pipeline stage's forwards, backwards and transfers (see pipeline.hpp).
#include "parallel/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace llmtrain {

PipelineStage::PipelineStage(GPT& gpt, int stage, int stages, PipelineSchedule schedule, const PipelineLinks& links)
    : gpt_(gpt), ops_(gpt.ops()), stage_(stage), stages_(stages), schedule_(schedule), links_(links),
      links_done_(gpt.ops().create_event()) {
    if (stages < 1 || stage < 0 || stage >= stages)
        throw std::invalid_argument("PipelineStage: stage " + std::to_string(stage) + " outside [0, " +
                                    std::to_string(stages) + ")");
    if ((!first() && (!links.act_prev || !links.grad_prev)) || (!last() && (!links.act_next || !links.grad_next)))
        throw std::invalid_argument("PipelineStage: stage " + std::to_string(stage) + " lacks a link to a neighbour");
    const GPTOptions& o = gpt.options();
    n_tokens_ = size_t(o.B) * size_t(o.T);  // with cp this rank's rows of the windows (GPTOptions::cp)
    const size_t cp = o.cp != nullptr ? size_t(o.cp->size()) : 1;
    act_elems_ = gpt.act_rows() * size_t(gpt.config().n_embd);  // this TP rank's rows with sequence parallelism
    const size_t act_bytes = act_elems_ * dtype_size(ops_.act_dtype());
    Allocator& a = gpt.allocator();
    tok_ = static_cast<int*>(a.alloc(MemCategory::workspace, n_tokens_ * sizeof(int)));
    tgt_ = static_cast<int*>(a.alloc(MemCategory::workspace, n_tokens_ * sizeof(int)));
    for (int b = 0; b < 2; ++b) {
        if (!first()) act_in_[b] = a.alloc(MemCategory::comm, act_bytes);
        if (!first()) grad_out_[b] = a.alloc(MemCategory::comm, act_bytes);
        if (!last()) grad_in_[b] = a.alloc(MemCategory::comm, act_bytes);
    }
    if (last()) logit_row_ = static_cast<float*>(a.alloc(MemCategory::workspace, gpt.config().padded_vocab_size() * 4));
    inputs_.resize(n_tokens_ * cp);
    targets_.resize(n_tokens_ * cp);
    if (cp > 1) in_rows_.resize(n_tokens_), tgt_rows_.resize(n_tokens_);
    if (last()) reserve_losses(1);
    // The backend's own host waits (the encoder backward's, for its pinned buffers: on the first
    // stage behind the gradient receives queued before them) poll under the links' watchdog too.
    ops_.set_host_waiter([this](const std::function<bool()>& done, const std::string& what) {
        poll_links(done, "pipeline stage " + std::to_string(stage_) + ": " + what);
    });
}

PipelineStage::~PipelineStage() {
    ops_.set_host_waiter({});
    Allocator& a = gpt_.allocator();
    for (void* p : {static_cast<void*>(tok_), static_cast<void*>(tgt_), act_in_[0], act_in_[1], grad_in_[0],
                    grad_in_[1], grad_out_[0], grad_out_[1], static_cast<void*>(logit_row_)})
        a.release(p);
    if (loss_host_) ops_.free_host(loss_host_);
    ops_.destroy_event(links_done_);
}

void PipelineStage::reserve_losses(int m) {
    if (m <= loss_cap_) return;
    if (loss_host_) ops_.free_host(loss_host_);
    loss_host_ = static_cast<float*>(ops_.malloc_host(size_t(m) * n_tokens_ * sizeof(float)));
    loss_cap_ = m;
}

void PipelineStage::poll_links(const std::function<bool()>& done, const std::string& what) {
    const std::string s = std::to_string(stage_), prev = std::to_string(stage_ - 1), next = std::to_string(stage_ + 1);
    const std::string ap = "pipeline stage " + prev + "->" + s + " activations",
                      gp = "pipeline stage " + s + "->" + prev + " gradients",
                      an = "pipeline stage " + s + "->" + next + " activations",
                      gn = "pipeline stage " + next + "->" + s + " gradients";
    poll_with_watchdog(done,
                       {{links_.act_prev, ap.c_str()},
                        {links_.grad_prev, gp.c_str()},
                        {links_.act_next, an.c_str()},
                        {links_.grad_next, gn.c_str()}},
                       what);
}

void PipelineStage::wait_links(const std::string& what) {
    ops_.record_event(links_done_);
    poll_links([this] { return ops_.query_event(links_done_); }, what);
}

double PipelineStage::train(int m, const Batches& next, float dloss) {
    if (m < 1) throw std::invalid_argument("PipelineStage::train: micro-batches must be >= 1, got " + std::to_string(m));
    const int K = gpt_.num_contexts();
    if (max_in_flight(schedule_, stage_, stages_, m) > K)
        throw std::invalid_argument("PipelineStage::train: stage " + std::to_string(stage_) + " holds " +
                                    std::to_string(max_in_flight(schedule_, stage_, stages_, m)) +
                                    " micro-batches at once but its GPT has " + std::to_string(K) + " contexts");
    const DType t = ops_.act_dtype();
    const auto t0 = t0_ = std::chrono::steady_clock::now();
    auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    CommHandle act_recv[2], grad_recv[2];
    auto post_act_recv = [&](int i) { act_recv[i % 2] = links_.act_prev->recv_async(act_in_[i % 2], act_elems_, t, 0); };
    auto post_grad_recv = [&](int i) {
        grad_recv[i % 2] = links_.grad_next->recv_async(grad_in_[i % 2], act_elems_, t, 1);
    };
    const std::vector<PipeOp> ops = stage_schedule(schedule_, stage_, stages_, m);
    // Issue order (see the header): on the link to the next stage, this stage's sends and receives
    // go in the order of its own op list, which the next stage follows too. So a gradient receive
    // is posted after the send of every forward listed before its backward: at that backward, or
    // at the backward just before it when no forward comes between.
    auto backward_at = [&](size_t k) { return k < ops.size() && ops[k].kind == PipeOp::backward; };
    // Before any receive is posted: a pinned allocation may wait for the whole device (see the header).
    if (last()) reserve_losses(m);
    if (!first()) post_act_recv(0);
    events_.clear();
    for (size_t k = 0; k < ops.size(); ++k) {
        const PipeOp& op = ops[k];
        const int i = op.micro_batch, ctx = i % K, buf = i % 2;
        double start = now();
        if (op.kind == PipeOp::forward) {
            next(i, inputs_.data(), targets_.data());
            gpt_.set_documents(inputs_.data(), ctx);  // with document masking: every stage, from the windows
            const int* in = first() ? rows(inputs_.data(), in_rows_) : nullptr;
            if (first()) ops_.memcpy_h2d(tok_, in, n_tokens_ * sizeof(int));
            if (last()) ops_.memcpy_h2d(tgt_, rows(targets_.data(), tgt_rows_), n_tokens_ * sizeof(int));
            if (!first()) {
                act_recv[buf]->wait();
                act_recv[buf].reset();
                if (i + 1 < m) post_act_recv(i + 1);  // lands while this micro-batch computes
                start = now();
            }
            // The first stage hands the backend its ids (Ops::encoder_host_tokens): its encoder
            // backward then buckets them without waiting for a device copy behind the receives.
            gpt_.forward(first() ? tok_ : nullptr, first() ? nullptr : act_in_[buf], last() ? tgt_ : nullptr, dloss,
                         true, ctx, in);
            if (last())  // (B*T) per-position losses, queued: read after the step's one wait
                ops_.memcpy_d2h(loss_host_ + size_t(i) * n_tokens_, gpt_.losses(ctx), n_tokens_ * sizeof(float));
            else  // the compute that follows waits for the send (see the header)
                links_.act_next->send_async(gpt_.act_out(ctx), act_elems_, t, 1)->wait();
        } else {
            const void* dout = nullptr;
            if (!last()) {
                if (!grad_recv[buf]) post_grad_recv(i);
                grad_recv[buf]->wait();
                grad_recv[buf].reset();
                if (i + 1 < m && backward_at(k + 1)) post_grad_recv(i + 1);  // lands while this one computes
                dout = grad_in_[buf];
                start = now();
            }
            gpt_.backward(dout, first() ? nullptr : grad_out_[buf], ctx);
            if (!first()) links_.grad_prev->send_async(grad_out_[buf], act_elems_, t, 0)->wait();
        }
        events_.push_back({op, start, now()});
    }
    if (!last()) return 0.0;
    wait_links("pipeline step: reading the losses");
    double total = 0.0;  // as GPT::forward_backward: each micro-batch's mean in double, rounded to float
    for (int i = 0; i < m; ++i) {
        double sum = 0.0;
        for (size_t k = 0; k < n_tokens_; ++k) sum += loss_host_[size_t(i) * n_tokens_ + k];
        total += static_cast<float>(sum / double(n_tokens_));
    }
    return total;
}

void PipelineStage::warm_up() {
    // Zero inputs, targets and output gradients: finite, and only the backend's buffers matter.
    const size_t act_bytes = act_elems_ * dtype_size(ops_.act_dtype());
    ops_.memset(tok_, 0, n_tokens_ * sizeof(int));
    ops_.memset(tgt_, 0, n_tokens_ * sizeof(int));
    for (int b = 0; b < 2; ++b) {
        if (act_in_[b]) ops_.memset(act_in_[b], 0, act_bytes);
        if (grad_in_[b]) ops_.memset(grad_in_[b], 0, act_bytes);
    }
    std::fill(inputs_.begin(), inputs_.end(), 0);
    for (int ctx = 0; ctx < gpt_.num_contexts(); ++ctx) {
        gpt_.set_documents(inputs_.data(), ctx);
        gpt_.forward(first() ? tok_ : nullptr, first() ? nullptr : act_in_[0], last() ? tgt_ : nullptr, 1.0f, true,
                     ctx);
        gpt_.backward(last() ? nullptr : grad_in_[0], first() ? nullptr : grad_out_[0], ctx);
    }
    if (gpt_.config().moe_experts > 0) {  // not a step: its balance losses and expert loads must not join step 1's
        gpt_.take_moe_aux_sum();
        std::vector<int64_t> load;
        gpt_.take_moe_load(load);
    }
    ops_.synchronize();
}

const int* PipelineStage::rows(const int* window, std::vector<int>& rows) const {
    if (rows.empty()) return window;  // no context parallelism: the window is the rows
    gpt_.window_rows(window, rows.data());
    return rows.data();
}

void PipelineStage::forward_only(const int* inputs, const int* targets) {
    const DType t = ops_.act_dtype();
    gpt_.set_documents(inputs, 0);  // with document masking: every stage, from the windows
    if (first())
        ops_.memcpy_h2d(tok_, rows(inputs, in_rows_), n_tokens_ * sizeof(int));
    else
        links_.act_prev->recv(act_in_[0], act_elems_, t, 0);
    if (last() && targets) ops_.memcpy_h2d(tgt_, rows(targets, tgt_rows_), n_tokens_ * sizeof(int));
    gpt_.forward(first() ? tok_ : nullptr, first() ? nullptr : act_in_[0], last() && targets ? tgt_ : nullptr, 0.0f,
                 false, 0);
    if (!last()) {
        links_.act_next->send(gpt_.act_out(0), act_elems_, t, 1);
        wait_links("pipeline forward: sending the activations");  // delivered before the host moves on
    }
}

float PipelineStage::evaluate(const int* inputs, const int* targets) {
    forward_only(inputs, targets);
    if (!last()) return 0.0f;
    ops_.memcpy_d2h(loss_host_, gpt_.losses(0), n_tokens_ * sizeof(float));
    wait_links("pipeline evaluation: reading the loss");
    double sum = 0.0;
    for (size_t k = 0; k < n_tokens_; ++k) sum += loss_host_[k];
    return static_cast<float>(sum / double(n_tokens_));
}

std::vector<float> PipelineStage::logits_at(const int* inputs, int pos) {
    forward_only(inputs, nullptr);
    if (!last()) return {};
    gpt_.logit_row(0, pos, logit_row_);  // all-gathered over the TP group, with cp from the row's holder
    std::vector<float> out(size_t(gpt_.config().vocab_size));
    wait_links("pipeline forward: reading the logits");  // before a copy to pageable memory could block
    ops_.memcpy_d2h(out.data(), logit_row_, out.size() * sizeof(float));
    wait_links("pipeline forward: reading the logits");
    return out;
}

}  // namespace llmtrain
