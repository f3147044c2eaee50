// parallel/pipeline.hpp — one pipeline stage's part of a step: the forwards and backwards of its
// micro-batches in the schedule's order (parallel/schedule.hpp: 1F1B or GPipe), the activations
// sent to the next stage and their gradients back through Comm send/recv (docs/distributed.md
// "Pipeline"). Narayanan et al. 2021 (1F1B, PipeDream-Flush); Huang et al. 2019 (GPipe).
//
// Each micro-batch in flight lives in its own GPT activation context (micro-batch i in context
// i mod contexts: under both schedules the micro-batches in flight are consecutive). Receives are
// non-blocking: the receive of micro-batch i+1's input is posted as soon as i's has landed, so it
// overlaps i's compute, into the other of two buffers. A send is waited for right after it is
// posted — on NCCL the compute stream waits for it, the host does not — so the work that follows
// it (and any receive posted later, which NcclComm orders after that work) comes after it: a
// stage never asks for an input before it has sent what its neighbour needs to produce it, which
// keeps even an executor that runs one stream at a time (emu/) free of deadlock; the
// cost is the transfer's latency, not its overlap with the next compute. Activations and gradients
// travel on separate Comms per neighbour (links), so a receive posted early never holds up a send
// in the other direction (NCCL runs one communicator's operations in order). Issue order: NCCL
// requires two ranks to issue the operations of the communicators they share in the same order (a
// kernel waiting on one link while the peer's waits on the other is a deadlock). On the links
// between stages s and s+1 both follow stage s's op list: s sends F(i)'s activations after F(i) and
// posts B(i)'s gradient receive only after the sends of the forwards listed before B(i); s+1 posts
// F(i+1)'s activation receive at F(i), which its list puts before B(j)'s gradient send exactly when
// s's list puts F(i+1) before B(j) (1F1B: s+1's warm-up is one forward shorter; GPipe: every F
// first). The emulated NCCL checks this order (docs/cuda_emu.md). No step may allocate
// device memory: cudaMalloc/cudaFree wait for the whole device, a pending receive included, whose
// sender may be waiting for this stage's next send (a deadlock on a GPU as under the emulator), so
// warm_up() runs every context once beforehand, locally, to allocate the backend's workspaces.
// Host waits. The last stage copies each micro-batch's per-position losses into pinned memory (a
// copy to pageable memory would block the host behind the stream) and reads them once per step
// after one timed wait (parallel/host_wait.hpp) that names its links: a neighbour that never sends
// ends in CommError after parallel.timeout_s. The other stages' only host waits in train() are the
// backend's own (the encoder backward's pinned bucket buffers on the first stage, behind the
// gradient receives queued before them): the stage sets them to poll under the same watchdog
// (Ops::set_host_waiter), so they end in the same CommError. The first stage passes its host ids
// to the forward (Ops::encoder_host_tokens), so no wait for a device copy of them is needed.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "parallel/comm.hpp"
#include "parallel/host_wait.hpp"
#include "parallel/schedule.hpp"

namespace llmtrain {

/// The Comms to this stage's neighbours: each a 2-rank group (lower stage index 0). Null where there
/// is no neighbour (stage 0 has no *_prev, the last stage no *_next).
struct PipelineLinks {
    Comm* act_prev = nullptr;   ///< activations from stage s-1
    Comm* grad_prev = nullptr;  ///< their gradients back to s-1
    Comm* act_next = nullptr;   ///< our activations to s+1
    Comm* grad_next = nullptr;  ///< their gradients from s+1
};

/// One executed forward or backward, seconds from the step's start (host clock, after the op's
/// compute was queued and, for the recorded order, its inputs had arrived).
struct PipeEvent {
    PipeOp op;
    double start, end;
};

class PipelineStage {
public:
    /// gpt: this stage's layer range, with at least max_in_flight(schedule, stage, stages, m) contexts
    /// for the m the step will use. Buffers (4 of (B,T,C) act dtype) come from gpt's allocator,
    /// MemCategory::comm. Errors: std::invalid_argument for a stage outside [0, stages) or links
    /// missing where a neighbour exists.
    PipelineStage(GPT& gpt, int stage, int stages, PipelineSchedule schedule, const PipelineLinks& links);
    ~PipelineStage();
    PipelineStage(const PipelineStage&) = delete;
    PipelineStage& operator=(const PipelineStage&) = delete;

    /// Fills micro-batch i's token ids and targets ((B,T) host int32 each, T the window: with
    /// context parallelism cp x the GPT's options().T, of which the stage takes its rows,
    /// GPT::window_rows); called once per micro-batch, in order, on every stage (each stage's
    /// loader stays in step). With document masking every stage finds the micro-batch's document
    /// boundaries from its input ids (GPT::set_documents).
    using Batches = std::function<void(int i, int* inputs, int* targets)>;
    /// One local forward and backward per activation context on zeros, no transfers: allocates every
    /// workspace the backend grows on first use, so that train() never allocates (see the header).
    /// Call it once before the first train(); it accumulates junk into the parameter gradients,
    /// which the caller then zeroes (the ZeRO engine's begin_step does).
    void warm_up();
    /// The m forwards and backwards of one step; parameter gradients accumulate in the GPT's store
    /// (dloss: d loss / d per-position loss). Returns the sum over micro-batches of each one's mean
    /// loss at the last stage, 0 elsewhere. Errors: std::invalid_argument for m < 1 or more
    /// micro-batches in flight than the GPT has contexts; CommError.
    double train(int m, const Batches& next, float dloss);
    /// Forward only of one micro-batch ((B,T) host int32 inputs and targets, whole windows as in
    /// Batches) through every stage. Returns its mean loss at the last stage (over this rank's
    /// rows with cp), 0 elsewhere. Errors: CommError.
    float evaluate(const int* inputs, const int* targets);
    /// Forward only of inputs (B,T) through every stage; the last stage returns the fp32 logits (V)
    /// at position pos of row 0 (with cp every CP rank of the last stage: GPT::logit_row), the
    /// others an empty vector. Errors: CommError.
    std::vector<float> logits_at(const int* inputs, int pos);

    /// The ops of the last train(), in the order executed, with their times (from last_start()).
    const std::vector<PipeEvent>& last_events() const { return events_; }
    std::chrono::steady_clock::time_point last_start() const { return t0_; }
    int stage() const { return stage_; }
    int stages() const { return stages_; }

private:
    bool first() const { return stage_ == 0; }
    bool last() const { return stage_ == stages_ - 1; }
    void forward_only(const int* inputs, const int* targets);
    /// The GPT's ids of (B,T) host windows: `window` itself without cp (rows empty), else this
    /// rank's rows of them (GPT::window_rows) in `rows` (B*T/cp), returned.
    const int* rows(const int* window, std::vector<int>& rows) const;
    /// The timed host wait on this stage's links for the work queued so far on the current stream;
    /// `what` names the operation. Errors: CommError (parallel/host_wait.hpp).
    void wait_links(const std::string& what);
    /// Polls done() under the watchdog of this stage's links (poll_with_watchdog); errors as it.
    void poll_links(const std::function<bool()>& done, const std::string& what);
    /// loss_host_ holds m micro-batches (grows once; pinned frees and allocations sync the device).
    void reserve_losses(int m);

    GPT& gpt_;
    Ops& ops_;
    int stage_, stages_;
    PipelineSchedule schedule_;
    PipelineLinks links_;
    size_t n_tokens_, act_elems_;         // B*T, GPT::act_rows()*C
    int *tok_ = nullptr, *tgt_ = nullptr;  // (B,T) device staging of the next forward's ids
    void* act_in_[2] = {nullptr, nullptr};    // (B,T,C) received activations, alternating
    void* grad_in_[2] = {nullptr, nullptr};   // (B,T,C) received output gradients, alternating
    void* grad_out_[2] = {nullptr, nullptr};  // (B,T,C) input gradients being sent, alternating
    float* logit_row_ = nullptr;              // (Vp) fp32, last stage
    float* loss_host_ = nullptr;              // (loss_cap_, B*T) pinned: the last stage's losses
    int loss_cap_ = 0;                        // micro-batches loss_host_ holds
    Event links_done_;                        // wait_links' event
    std::vector<int> inputs_, targets_;       // (B,T) host windows (T: cp x the GPT's with cp)
    std::vector<int> in_rows_, tgt_rows_;     // (B,T/cp) host: this rank's rows of them (cp > 1; else empty)
    std::vector<PipeEvent> events_;
    std::chrono::steady_clock::time_point t0_{};
};

}  // namespace llmtrain
