// app/checkpoint/checkpoint.hpp — checkpoints on disk: layout, the crash-safe write protocol, integrity,
// lineage (run ids) and resume lookup.
//
// docs/design.md "Formats", docs/checkpoints.md "Checkpoints". A checkpoint is the directory
// <run_dir>/checkpoints/step_<N>/ holding
//   model.h5       one fp32 dataset per parameter tensor, by GPT-2 name and global shape
//                  (the fp32 master weights when the backend keeps them); laid out by rank 0 at
//                  the start, each writing rank then pwrites its own weights into it (its slices);
//   optim_<k>.h5   written by the rank holding shard k: /m/<name> and /v/<name>, 1-D fp32 pieces of
//                  each tensor that lies in one of the rank's flat-buffer segments, each with an int64
//                  attribute `offset` (first element within the flattened tensor), so a run with
//                  another sharding or padding can load them;
//   state.toml     (format 4) step, tokens seen, loader position, sampler RNG, Adam step, model shape
//                  and config hash, world layout, backend/precision, the run id, the SHA-256 ([files])
//                  and size ([bytes]) of every other file — model.h5 written by several ranks as
//                  "sliced", its [slices] tiling the file, each with its own SHA-256 — and, last,
//                  [integrity] state_sha256 over the bytes before it. Written last: it marks
//                  completion. Formats 1 (no run id, no checksums), 2 (no sizes) and 3 (model.h5
//                  hashed whole) still read.
// HDF5 files are written without object timestamps, so the same tensors give the same bytes; HDF5
// lays out each file and the raw data goes in by large pwrites, hashed from memory as it is written
// (app/checkpoint/raw_h5.hpp). With one part (one writing rank) that rank writes model.h5 itself.
// Protocol (after llm.c's DONE marker and Megatron's `latest` file): every rank that holds a shard
// writes optim_<k>.h5 and its weights into model.h5 (model.h5 whole when it is the only part) in
// checkpoints/.tmp_step_<N>/, fsyncs and hashes them, and reports (name, bytes, SHA-256, slices) to
// rank 0 (app/checkpoint/saver.hpp: no weights travel over MPI, no directory is listed); rank 0
// checks each reported file's size and that the slices cover every tensor once (no file is re-read:
// docs/checkpoints.md "Who does what at a commit"), writes state.toml listing exactly the
// reported files, fsyncs the directory, moves an existing step_<N> aside to .old_step_<N>, renames
// the directory to step_<N>, fsyncs checkpoints/, removes .old_step_<N>, replaces checkpoints/latest
// ("step_<N>") through latest.tmp and a rename, and only then prunes (each pruned step_<M> renamed
// to .del_step_<M> first). A crash at any point leaves the previous complete checkpoint intact;
// recover_checkpoint_leftovers() tidies up at start, and resume follows `latest` (the commit point).
// Crash tests: LLMTRAIN_TEST_KILL_AT_CHECKPOINT_OP=<k> makes the process raise SIGKILL just before
// its k-th file-system operation of the protocol (tests/app/checkpoint_fault_test.py).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/loader.hpp"
#include "model/param_layout.hpp"

namespace llmtrain {

/// A checkpoint cannot be written, found, read, or does not fit the model; what() names the path.
struct CheckpointError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Everything besides tensors that an exact resume needs (state.toml).
struct TrainState {
    int64_t step = 0;              ///< optimizer steps completed
    uint64_t tokens_seen = 0;      ///< training tokens consumed over all ranks
    LoaderState loader;            ///< train loader's stream position (the same on every rank, in any layout), a mixture's per source ([[loader.sources]])
    /// [loader] {epoch, batch} of a checkpoint written before stream positions (each rank's
    /// micro-batch index; `loader` is then unset): resume converts it in the layout it was written in.
    std::optional<std::pair<uint64_t, uint64_t>> legacy_loader;
    std::string sampler_rng;       ///< std::mt19937_64 state as written by operator<<
    int adam_t = 0;                ///< AdamW steps taken (bias correction)
    std::string model_config_hash; ///< model_config_hash() of the run that wrote it
    GPTConfig model;               ///< model shape, for error messages
    /// [model_identity] (format 4): every key that changes the model's function, key = value text,
    /// as the trainer gives it (model_identity() in app/config/config.hpp) and written when not
    /// empty; empty when read from an older checkpoint.
    std::vector<std::pair<std::string, std::string>> model_identity;
    int dp = 1;                    ///< data-parallel ranks
    int world_size = 1;
    std::string backend, precision;
    std::string run_id;            ///< new_run_id() of the run's start from scratch, kept across resumes ("" in format 1)
    /// Times this run was started again from one of its own checkpoints before this state was
    /// written (0 for a run never resumed; absent, so 0, in checkpoints written before it existed).
    int64_t restarts = 0;
    /// model.moe with bias_update_rate > 0: the selection biases (n_layer, E) fp32, layer-major
    /// ([moe] bias, one array per layer, as doubles: exact for fp32); empty otherwise (and absent).
    std::vector<float> moe_bias;
    int moe_experts = 0;  ///< E of moe_bias's rows (its width in state.toml)
};

/// One segment of a rank's optimizer state: AdamW m and v for flat-buffer elements [begin, end), host fp32.
struct OptimShardView {
    size_t begin = 0, end = 0;
    const float* m = nullptr;  ///< (end - begin)
    const float* v = nullptr;  ///< (end - begin)
    const float* w = nullptr;  ///< (end - begin) the fp32 weights, for write_model_part (else unused)
};

/// One file of a checkpoint as the rank that wrote it reports it to the committing rank.
/// Bytes [lo, hi) of a file and the hex SHA-256 of exactly those bytes: model.h5 written by several
/// ranks at once is checked slice by slice (no rank ever reads the whole file to hash it).
struct ByteSlice {
    uint64_t lo = 0, hi = 0;
    std::string sha256;
};

struct PartInfo {
    std::string name;    ///< file name inside the checkpoint directory, e.g. "optim_3.h5"
    uint64_t bytes = 0;  ///< its size (a model.h5 slice report: the bytes that rank wrote)
    std::string sha256;  ///< hex SHA-256 of its bytes; kSlicedSha when `slices` say it instead
    std::vector<ByteSlice> slices;  ///< model.h5 written by slices: ascending, disjoint; else empty
};

/// PartInfo::sha256 of a file checked by its slices (state.toml [files] says so too).
inline constexpr const char* kSlicedSha = "sliced";

/// (name, size, SHA-256) of tmp_dir/name as it is on disk. Errors: CheckpointError naming the file.
PartInfo describe_part(const std::string& tmp_dir, const std::string& name);

/// A fresh run id: 128 random bits (std::random_device) as 32 lowercase hex digits.
std::string new_run_id();

// ---- writing (write.cpp) ----

/// <run_dir>/checkpoints/.tmp_step_<step>: where every rank writes its files for that step.
std::string checkpoint_tmp_dir(const std::string& run_dir, int64_t step);

/// Rank 0: creates checkpoint_tmp_dir(run_dir, step) (and checkpoints/ and run_dir when missing,
/// each new directory's parent fsynced after it is made), removing a leftover of that name, and
/// returns it. Errors: CheckpointError naming the path and the OS reason (also when the leftover
/// cannot be removed).
std::string begin_checkpoint(const std::string& run_dir, int64_t step);

/// Any rank k: writes tmp_dir/optim_<k>.h5 holding the m/v pieces of every tensor inside each of
/// `views` (segments of the flat buffer; they must not overlap), fsyncs and hashes it. Throws
/// before creating the file when any m or v element of a real parameter is non-finite (naming it).
PartInfo write_optim_shard(const std::string& tmp_dir, int k, const ParamLayout& layout,
                           const std::vector<OptimShardView>& views);

/// Rank 0 at the start of a checkpoint with several parts: creates tmp_dir/model.h5's structure
/// (every tensor by name and global shape, its data space allocated, no data written), so that
/// every writing rank can then write its own weights into it (write_model_slices). Errors:
/// CheckpointError naming the file and the HDF5 or OS reason.
void create_model_file(const std::string& tmp_dir, const ParamLayout& layout);

/// Any rank k, after create_model_file: writes the weights of every tensor piece inside `views`
/// (views' w) into tmp_dir/model.h5 at the piece's place in the tensor's data (pwrite; the other
/// ranks write theirs at the same time), hashing each piece from memory, and fsyncs. Returns
/// {"model.h5", bytes written, kSlicedSha, one slice per piece}. Throws before writing anything when
/// a weight is non-finite (naming the tensor and element); CheckpointError for HDF5/OS failures.
PartInfo write_model_slices(const std::string& tmp_dir, const ParamLayout& layout,
                            const std::vector<OptimShardView>& views);

/// Rank 0 at the commit: the ranks' model.h5 slices, checked (disjoint, each inside one tensor's
/// data, together covering every tensor exactly), completed with the bytes no rank wrote (HDF5's
/// metadata, hashed here from the file: a few KiB) and fsynced. Returns model.h5 as one part whose
/// slices tile [0, its size). Errors: CheckpointError naming the file and the gap or overlap.
PartInfo seal_model_slices(const std::string& tmp_dir, const ParamLayout& layout, std::vector<ByteSlice> slices);

/// The one rank holding every tensor whole (one part, no pipeline split): writes tmp_dir/model.h5
/// straight from the views' w (each tensor inside one view), fsyncs and hashes it; the commit then
/// has nothing to assemble. Throws before creating the file when a tensor is not whole in one view
/// or a weight is non-finite (naming the tensor and element).
PartInfo write_model_file(const std::string& tmp_dir, const ParamLayout& layout,
                          const std::vector<OptimShardView>& views);

/// Rank k's two files at once, on two threads: optim_<k>.h5 (write_optim_shard) and either
/// model.h5 (write_model_file, whole_model: the only part) or its slices of model.h5
/// (write_model_slices). Returns {optim, model}. Errors: as those functions (the optimizer file's first).
std::vector<PartInfo> write_rank_files(const std::string& tmp_dir, int k, const ParamLayout& layout,
                                       const std::vector<OptimShardView>& views, bool whole_model);

/// Rank 0, once every rank has reported its parts (app/checkpoint/saver.hpp gathers them): checks
/// that each reported file exists with its reported size, seals model.h5's slices when the ranks
/// wrote it by slices (seal_model_slices: no file is re-read or re-hashed here), lists
/// checkpoints/ (nothing is published when it cannot be), writes state.toml last listing exactly
/// the reported files (st.run_id must be set), renames tmp_dir into step_<st.step> (replacing an
/// existing one), replaces `latest`, then prunes: keep_last > 0 keeps the keep_last newest
/// checkpoints of st.run_id up to this step; checkpoints of other runs and newer steps are never
/// removed; each pruned one is renamed to .del_step_<N> before it is deleted, so a crash never
/// leaves a half-removed step_<N>. The temporary directory is never listed. Returns the final
/// directory. Errors: CheckpointError naming the path (no optim part, no weights, a file missing
/// or differing in size from its report, slices that overlap or leave a tensor's bytes unwritten,
/// checkpoints/ that cannot be listed).
std::string commit_checkpoint(const std::string& run_dir, const std::string& tmp_dir, const TrainState& st,
                              const ParamLayout& layout, const std::vector<PartInfo>& parts, int keep_last);

/// Rank 0: removes tmp_dir after a failed write; never throws.
void abort_checkpoint(const std::string& tmp_dir) noexcept;

/// One process holding everything: begin, one optimizer shard file and one model.h5 slice report
/// per view (optim_<k>.h5 and shards[k]'s weights, taken from params, into model.h5), commit; aborts
/// the temporary directory on error and rethrows. params: host fp32, layout.total_numel() elements.
std::string save_checkpoint(const std::string& run_dir, const TrainState& st, const ParamLayout& layout,
                            const float* params, const std::vector<OptimShardView>& shards, int keep_last);

/// Rank 0 at start-up, before resume lookup: finishes or undoes an interrupted write. Removes
/// latest.tmp, .tmp_step_* directories and .del_step_* (a pruning that crashed); a .old_step_N is
/// renamed back to step_N when step_N is missing and it verifies, else removed. Returns one line
/// per action (for the log). Errors: CheckpointError when checkpoints/ exists but cannot be listed
/// or a verified .old_step_N cannot be renamed back.
std::vector<std::string> recover_checkpoint_leftovers(const std::string& run_dir);

// ---- verification (read.cpp) ----

/// Why dir is not a usable checkpoint, or "" when it is: state.toml parses (and, format 2, its
/// state_sha256 and the SHA-256 of every listed file match, and no unlisted optim_*.h5 is present).
/// The SHA-256 checks (each whole file, each slice of a sliced model.h5, in state.toml's order)
/// are shared: this call makes only those j with j % shares == share, so `shares` ranks calling it
/// with share = 0 .. shares - 1 check everything once between them (resume: verify_checkpoint);
/// shares = 0 makes none (state.toml, the files' presence and sizes only).
std::string checkpoint_problem(const std::string& dir, int share = 0, int shares = 1);

// ---- lookup (lookup.cpp) ----

/// The outcome of resume lookup.
struct ResumeChoice {
    std::string dir;                   ///< the checkpoint to resume from; "" = start from scratch
    std::string run_id;                ///< the run it belongs to ("" when starting from scratch)
    /// Notes for the log: "skipped step_N: <reason>" for each newer one passed over, led by
    /// "checkpoint: checkpoints/latest ...; taking the newest ..." when `latest` was not followed.
    std::vector<std::string> skipped;
};

/// How resume lookup judges a candidate checkpoint directory: "" when usable, else why not.
/// full_check (checkpoint_problem with every SHA-256) by default; resume on several ranks passes a
/// check without the SHA-256s (checkpoint_problem(dir, 0, 0)) that also refuses the directories the
/// ranks' shared verification refused (app/main.cpp), so no rank hashes a whole checkpoint alone.
using CheckpointCheck = std::function<std::string(const std::string& dir)>;

/// checkpoint_problem(dir): every SHA-256 checked by this process.
std::string full_check(const std::string& dir);

/// The newest checkpoint of run `run_id` under run_dir/checkpoints that verifies
/// (checkpoint_problem() == ""), with the newer step_* directories skipped and why. dir is "" when
/// none verifies (also when the run dir does not exist). Errors: CheckpointError when checkpoints/
/// exists but cannot be listed.
ResumeChoice find_latest_checkpoint(const std::string& run_dir, const std::string& run_id,
                                    const CheckpointCheck& check = full_check);

/// The run a run dir continues: the run id in the state.toml of `latest`'s target when that file
/// reads (its own state_sha256 matches), else that of the newest checkpoint that fully verifies,
/// else nullopt (no usable checkpoint; "" is the id of format-1 checkpoints). `latest` is replaced only after a checkpoint is complete, so it
/// names the run that wrote last; the fallback covers a `latest` lost or damaged after the fact.
std::optional<std::string> current_run_id(const std::string& run_dir, const CheckpointCheck& check = full_check);

/// The checkpoint a run dir continues from, the one answer to "which checkpoint does a run dir
/// mean" (resume through resolve_resume, llmtrain-export and llmtrain-eval through
/// checkpoint_named; docs/checkpoints.md "Which checkpoint a run dir means"): the one `latest` names when it verifies (a newer
/// step_* is then passed over: a rollback abandoned it, or its write stopped before `latest`
/// moved), else find_latest_checkpoint(run_dir, current_run_id(run_dir)) with a first note saying
/// why `latest` was not followed (missing, unreadable, or its checkpoint does not verify). dir is
/// "" when nothing verifies. Errors: CheckpointError when checkpoints/ exists but cannot be listed.
ResumeChoice find_resume_checkpoint(const std::string& run_dir, const CheckpointCheck& check = full_check);

/// The checkpoint `path` names, for the tools that take a checkpoint or a run directory
/// (llmtrain-export, llmtrain-eval): path itself when it holds a state.toml, else, when it holds
/// checkpoints/, the one find_resume_checkpoint(path) gives: the same one checkpoint.resume =
/// "auto" resumes from (after a rollback `latest`'s, not the newest step_*). Returns "" when path is
/// neither (another format's file or directory). Errors: CheckpointError naming the path when a run
/// directory has no checkpoint that verifies (with each step_* passed over and why) or the named
/// checkpoint does not verify (checkpoint_problem).
std::string checkpoint_named(const std::string& path);

/// Resolves checkpoint.resume on rank 0 (broadcast the dir to the other ranks):
///  "auto": find_resume_checkpoint(run_dir); from scratch when the run dir has no step_* directory;
///          CheckpointError when it has some but none of the run verifies.
///  "none": from scratch; CheckpointError when the run dir already holds checkpoints, unless overwrite.
///  a path: that directory, which must verify. Errors: CheckpointError naming the path and reason.
ResumeChoice resolve_resume(const std::string& resume, const std::string& run_dir, bool overwrite,
                            const CheckpointCheck& check = full_check);

// ---- reading (read.cpp) ----

/// Reads dir/state.toml (format 1 or 2). Errors: CheckpointError naming the file and the bad or
/// missing key. Checksums are not checked here (checkpoint_problem does).
TrainState read_train_state(const std::string& dir);

/// Fills params (host fp32, layout.total_numel(); padding elements set to 0) from dir/model.h5 by
/// tensor name. Errors: CheckpointError naming the file and tensor when one is missing or its shape
/// differs from the layout's.
void read_params(const std::string& dir, const ParamLayout& layout, float* params);

/// Fills m and v (host fp32, end - begin elements each; padding set to 0) for flat elements
/// [begin, end) of `layout` from every optim_<k>.h5 shard state.toml lists (format 1: found in dir). Errors: CheckpointError when a
/// shard is unreadable, a tensor has an m piece without its v piece (or the reverse), two shard
/// files hold the same element (naming both), or some parameter element of the range is in none.
void read_optim(const std::string& dir, const ParamLayout& layout, size_t begin, size_t end, float* m,
                float* v);

// ---- reading by shard (read_shard.cpp) ----

/// Fills params (host fp32, the total numel of `ranges`, back to back; padding elements 0) with
/// the flat elements `ranges` (ascending, disjoint) of `layout` from dir/model.h5, reading only
/// those elements (HDF5 hyperslabs of the whole tensors). layout may be a TP rank's local layout
/// (tp > 1): each element is read from its place in the whole tensor (ParamLayout::local_runs).
/// A rank resuming reads its own shard this way: host memory and I/O for its elements only
/// (docs/checkpoints.md "By shard"). Errors: CheckpointError naming the file and tensor when one
/// is missing or its shape differs from the layout's full shape.
void read_params_ranges(const std::string& dir, const ParamLayout& layout, const std::vector<FlatRange>& ranges,
                        float* params);

/// Fills m and v (host fp32, the total numel of `ranges` each, back to back; padding 0) likewise
/// from the optim_<k>.h5 parts state.toml lists (format 1: found in dir): of each 1-D piece only
/// the elements inside `ranges` are read, and pieces of tensors outside them are not opened.
/// Errors: CheckpointError when a part is unreadable, a tensor has an m piece without its v piece
/// (or the reverse), two parts hold the same needed element (naming both), or a needed element
/// is in none.
void read_optim_ranges(const std::string& dir, const ParamLayout& layout, const std::vector<FlatRange>& ranges,
                       float* m, float* v);

}  // namespace llmtrain
