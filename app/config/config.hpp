// app/config/config.hpp — the resolved llmtrain configuration and its TOML loader.
//
// Sections and keys follow the field's names (docs/configuration.md lists every key, its default,
// range and meaning). Loading is strict: unknown keys, wrong types (TOML++ value_exact, no silent
// conversion), out-of-range values and unreadable files raise ConfigError with file:line:column.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/param_layout.hpp"  // GPTConfig

namespace llmtrain {

/// A bad configuration; what() is "<file>:<line>:<col>: <key>: <what was expected>". Exit code 2.
struct ConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct RunConfig {
    std::string name = "tiny";          ///< run label (metrics label `run`)
    std::string run_dir = "runs/tiny";  ///< log.txt, config.toml, checkpoints/
    std::string backend = "cpu";        ///< "cpu" | "cuda" | "auto"
    uint64_t seed = 1337;
    int max_steps = 1000;               ///< optimizer steps
    int log_interval = 10;
    int eval_interval = 100;            ///< 0 disables; eval also runs at the last step
    int eval_steps = 20;                ///< val micro-batches per eval; 0 = the whole val file
    int eval_hellaswag_interval = 0;    ///< steps between HellaSwag evaluations (app/eval/hellaswag_eval.hpp); 0 disables
    int eval_hellaswag_items = 0;       ///< the first N items of data.hellaswag; 0 = all
    int sample_interval = 200;          ///< 0 disables
    int sample_tokens = 64;
    int sample_top_k = 40;
    float sample_temperature = 1.0f;
    double peak_flops = 0;              ///< per device, FLOP/s, for MFU; 0 = backend default
    std::vector<int> trace;             ///< [first, last] steps traced (Chrome trace-event JSON per rank); empty = none
    friend bool operator==(const RunConfig&, const RunConfig&) = default;
};

struct ModelConfig {
    int n_layer = 4, n_head = 4, n_embd = 256, seq_len = 256, vocab_size = 8192;
    std::string arch = "gpt2";          ///< "gpt2" | "llama" (model/arch.hpp: the block's pieces)
    int n_kv_head = 0;                  ///< key/value heads (grouped-query attention), dividing n_head; 0 = n_head
    int intermediate_size = 0;          ///< llama's SwiGLU width; 0 = 8/3 n_embd rounded up to multiple_of
    int multiple_of = 256;              ///< rounding of the default intermediate_size
    float norm_eps = 1e-5f;             ///< llama's RMSNorm epsilon (GPT-2's LayerNorm: 1e-5 always)
    float rope_theta = 10000.0f;        ///< llama's rotary base
    bool tie_embeddings = true;         ///< LM head = token embedding (gpt2 always; llama as set)
    int head_dim = 0;                   ///< llama's attention head size (Qwen3's head_dim); 0 = n_embd / n_head
    bool qk_norm = false;               ///< llama: Qwen3's RMSNorm of each q and k head before the rotation
    std::string attention = "auto";     ///< "auto" | "native" | "cublas" | "cudnn" (the last two cuda only)
    int attention_workspace_mb = 1200;  ///< MiB of scores per cublas attention tile (model/cuda/cuda_backend.hpp's
                                        ///< kDefaultAttentionWorkspaceMb: GPT-2 1.5B, micro-batch 8 in one tile)
    bool matmul_autotune = false;       ///< time cuBLASLt's candidate algorithms per GEMM shape (cuda; per process)
    std::string init_from;              ///< "" = random init; else an llm.c model file or a HuggingFace GPT-2
                                        ///< (app/interop/pretrained.hpp), read when the run starts from scratch
    friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

/// [model.moe]: a mixture of experts in place of every block's MLP (Llama only; docs/model.md
/// "Mixture of experts"). n_experts = 0: dense.
struct MoeConfig {
    int n_experts = 0;                  ///< routed experts per layer; 0 = no MoE
    int top_k = 2;                      ///< experts per token, 1..n_experts
    int n_shared_experts = 0;           ///< experts every token visits (DeepSeek-V3), one dense SwiGLU
    int expert_ffn = 0;                 ///< an expert's SwiGLU width; 0 = the dense width (intermediate_size)
    std::string router = "softmax";     ///< "softmax" (Mixtral, Qwen3-MoE) | "sigmoid" (DeepSeek-V3's scores)
    float aux_loss_coef = 0.01f;        ///< alpha of the load-balancing loss (Switch Transformer); 0 = none
    /// gamma of DeepSeek-V3's auxiliary-loss-free balancing (§2.1.2): after each step every expert's
    /// selection bias moves by -gamma * sign(load - mean load); 0 = off; router = "sigmoid" only.
    float bias_update_rate = 0.0f;
    /// Switch Transformer's capacity factor c: each expert takes at most ceil(c * B*T * top_k /
    /// n_experts) (token, slot) pairs of a micro-batch, the first in token order; 0 = dropless.
    float capacity_factor = 0.0f;
    friend bool operator==(const MoeConfig&, const MoeConfig&) = default;
};

/// One source of a training mixture ([[data.sources]], docs/data.md "Sources").
struct DataSource {
    std::string name;                   ///< unique; labels its log figures, metrics and checkpoint state
    std::string path;                   ///< a token file or a glob of shards ("data/web/train_*.h5")
    double weight = 1.0;                ///< > 0: its share of the training windows is weight / sum of weights
    std::string val;                    ///< its own val file or glob; "" = no per-source val loss
    friend bool operator==(const DataSource&, const DataSource&) = default;
};

struct DataConfig {
    std::string train = "data/brown/train.h5";  ///< a file or a glob of shards; unused with sources
    std::string val = "data/brown/val.h5";
    std::vector<DataSource> sources;    ///< a training mixture instead of train; empty = train alone
    std::string hellaswag;              ///< HellaSwag items (six-line text, plain or gzip); "" = the project's copy
    bool document_mask = false;         ///< attention only within a document of a packed window (model/documents.hpp)
    bool reset_position_ids = false;    ///< positions restart at 0 at each document of a window
    friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

struct TrainingConfig {
    int micro_batch_size = 16;
    int global_batch_size = 0;          ///< sequences per optimizer step; 0 = micro_batch_size * grad_accum_steps * dp
    int grad_accum_steps = 0;           ///< 0 = derived from global_batch_size (1 if both are 0)
    std::string precision = "fp32";     ///< "fp32" | "bf16" (bf16: cuda only)
    float grad_clip = 1.0f;             ///< 0 disables
    bool stochastic_rounding = false;   ///< bf16 params rounded stochastically from the fp32 master weights
    std::string fp8 = "off";            ///< "off" | "tensorwise" | "rowwise": the blocks' linear layers in FP8 (docs/fp8.md)
    int max_skipped_steps = 10;         ///< consecutive non-finite steps (skipped, no update) before the run stops
    friend bool operator==(const TrainingConfig&, const TrainingConfig&) = default;
};

struct OptimizerConfig {
    float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
    std::string offload = "none";  ///< "none" | "cpu": optimizer state in pinned host memory (docs/parallelism.md)
    float offload_fraction = 1.0f; ///< (0, 1]: the share of this rank's shard offloaded
    float offload_chunk_mb = 16;   ///< fp32 master MiB per chunk of the double-buffered host step
    friend bool operator==(const OptimizerConfig&, const OptimizerConfig&) = default;
};

struct LRScheduleConfig {
    std::string decay = "cosine";       ///< "cosine" | "linear" | "constant" | "wsd" (warmup-stable-decay)
    int warmup_steps = 100;
    float min_lr = 1e-4f;
    float decay_ratio = 0.1f;           ///< wsd: the share of run.max_steps at the end that decays (torchtitan's name)
    std::string decay_type = "linear";  ///< wsd: the decay's shape, "linear" | "sqrt" | "cosine" (torchtitan's name)
    friend bool operator==(const LRScheduleConfig&, const LRScheduleConfig&) = default;
};

struct ParallelConfig {
    int dp = 0;                         ///< data-parallel ranks; 0 = world size / (pp x tp x cp)
    int pp = 1;                         ///< pipeline stages (1 until the pipeline lands)
    int tp = 1;                         ///< tensor-parallel ranks per layer (Megatron column/row split); world = pp x dp x tp
    bool sequence_parallel = false;     ///< with tp > 1: the residual stream and LayerNorms on 1/tp of the rows each
    int cp = 1;                         ///< context-parallel ranks per window (the sequence split); world = pp x dp x cp x tp
    int ep = 1;                         ///< expert-parallel ranks: each MoE layer's experts split over ep of the dp ranks (must divide dp and model.moe.n_experts)
    int zero_stage = 0;                 ///< 0 plain DP, 1 optimizer state, 2 + grads, 3 + params sharded
    int zero_group_size = 0;            ///< ranks a ZeRO group shards over; 0 = all dp ranks
    std::string grad_reduce_dtype = "fp32";  ///< "fp32" | "bf16": gradients on the wire; unset: training.precision (load_config)
    double timeout_s = 600;             ///< a collective waiting longer ends the job; 0 = never
    std::string comm = "auto";          ///< "auto" | "nccl" | "mpi": device-buffer Comm (auto: nccl on cuda, mpi on cpu)
    bool hierarchical_allreduce = false;  ///< MPI all-reduces through the nodes (parallel/hier_comm.hpp)
    bool overlap_grad_reduce = true;    ///< DP / ZeRO-1: reduce each unit's gradient while the backward goes on
    friend bool operator==(const ParallelConfig&, const ParallelConfig&) = default;
};

/// The pipeline's layer split and schedule, with parallel.pp stages (parallel/partition.hpp, parallel/schedule.hpp).
struct PipelineConfig {
    std::vector<int> layers_per_stage;  ///< layers of each stage (pp entries, sum n_layer); empty = balanced by FLOPs
    std::string schedule = "1f1b";      ///< "1f1b" | "gpipe"
    std::string plan = "none";          ///< "none" | "auto": rank 0 plans the two lists at start-up (app/plan/plan.hpp)
    double plan_memory_gib = 0;         ///< with plan = "auto": device memory the plan must fit; 0 = the device's total
    friend bool operator==(const PipelineConfig&, const PipelineConfig&) = default;
};

struct ActivationCheckpointConfig {
    float ratio = 0.0f;                 ///< fraction of each stage's layers recomputed in backward, [0,1] (floor)
    std::vector<float> ratio_per_stage; ///< one ratio per stage (pp entries), instead of ratio; empty = unused
    std::vector<int> layers_per_stage;  ///< recomputed layers per stage (pp entries); wins over both ratios
    friend bool operator==(const ActivationCheckpointConfig&, const ActivationCheckpointConfig&) = default;
};

struct CheckpointConfig {
    int interval = 500;                 ///< steps; 0 = only at the end and on SIGTERM/SIGINT
    bool at_end = true;                 ///< also at run.max_steps and on SIGTERM/SIGINT (checkpoints_on)
    int keep_last = 3;                  ///< complete checkpoints kept; 0 = keep all
    std::string resume = "auto";        ///< "auto" | "none" | a checkpoint directory path
    bool overwrite = false;             ///< allow resume = "none" in a run dir that has checkpoints
    bool async = true;                  ///< write in a background thread while training goes on
    /// The longest other ranks keep waiting, past parallel.timeout_s, on a live rank busy with a
    /// checkpoint (writing its files, committing, checking them at resume); 0 = no limit
    double timeout_s = 3600;
    friend bool operator==(const CheckpointConfig&, const CheckpointConfig&) = default;
};

struct MetricsConfig {
    bool enabled = true;
    std::string listen = "127.0.0.1:9400";  ///< host:port; port 0 picks a free one; + local rank
    friend bool operator==(const MetricsConfig&, const MetricsConfig&) = default;
};

struct Config {
    RunConfig run;
    ModelConfig model;
    MoeConfig moe;  ///< [model.moe]
    DataConfig data;
    TrainingConfig training;
    OptimizerConfig optimizer;
    LRScheduleConfig lr_schedule;
    ParallelConfig parallel;
    PipelineConfig pipeline;
    ActivationCheckpointConfig activation_checkpoint;
    CheckpointConfig checkpoint;
    MetricsConfig metrics;
    friend bool operator==(const Config&, const Config&) = default;
};

/// Loads `path` (may be empty: defaults only), then applies `overrides` ("section.key=value", the
/// value in TOML syntax, e.g. training.precision="bf16" or run.max_steps=50), then validates.
/// Errors: ConfigError with file:line:column (or "--set <override>") and the expected type/range.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);

/// Derives the batch keys for `dp` data-parallel ranks (dp >= 1): with S = micro_batch_size * dp,
/// grad_accum_steps = global_batch_size / S when only global_batch_size is set, global_batch_size =
/// S * grad_accum_steps when only grad_accum_steps is set, grad_accum_steps = 1 when neither is.
/// Errors: ConfigError when global_batch_size is not a multiple of S, or both are set and disagree.
void resolve_batch(Config& cfg, int dp);

/// The resolved config as TOML (every key, in section order); load_config of it gives it back.
std::string to_toml(const Config& cfg);

/// The model's identity: every key that changes the function the model computes, as (key, value
/// text) pairs in a fixed order (docs/configuration.md "The model hash"): arch, n_layer, n_head,
/// n_embd, seq_len, vocab_size, and for an architecture other than GPT-2 (whose other keys are
/// fixed by it: LayerNorm eps 1e-5, biases, learned positions, GELU 4C, tied head) n_kv_head and
/// intermediate_size resolved, tie_embeddings, rope_theta and norm_eps (floats in their shortest
/// fixed-point text that reads back exactly: "500000", "0.00001"), head_dim when it differs from
/// n_embd / n_head, qk_norm ("true") when set (so a dense model's identity stays what it was), and with model.moe
/// moe.n_experts, moe.top_k, moe.n_shared_experts, moe.expert_ffn resolved and moe.router (the
/// balance loss's coefficient changes training, not the function). The padded vocabulary follows from vocab_size. Errors: std::invalid_argument from
/// ArchSpec for an invalid shape.
using ModelIdentity = std::vector<std::pair<std::string, std::string>>;
ModelIdentity model_identity(const GPTConfig& g);

/// The hash stored in checkpoints (state.toml model.config_hash): 16 hex digits, the FNV-1a 64-bit
/// hash of "<arch>:k=v,k=v,..." over model_identity(gpt_config_of(cfg)) after arch.
std::string model_config_hash(const Config& cfg);

/// The hash checkpoints before state.toml format 4 recorded: the same text without the keys added
/// since (rope_theta, norm_eps); equal to model_config_hash for GPT-2.
std::string legacy_model_config_hash(const GPTConfig& g);

/// Why a checkpoint cannot hold cfg's model, or "" when it can: `recorded` is its state.toml
/// [model_identity] (empty before format 4; then `recorded_model`, its [model] keys, stands in when
/// they hash to recorded_hash, by the legacy or the current text, else recorded_hash alone is
/// compared with cfg's two hashes). Names the first differing key: "model.rope_theta: the checkpoint has 10000, the
/// config 500000".
std::string model_identity_mismatch(const ModelIdentity& recorded, const GPTConfig& recorded_model,
                                    const std::string& recorded_hash, const Config& cfg);

/// The model configuration of cfg.model (the config room's mapping; model/ knows no Config).
GPTConfig gpt_config_of(const Config& cfg);

}  // namespace llmtrain
