// app/interop/checkpoint_model.hpp — a checkpoint's whole model configuration, for the tools that
// read a checkpoint's weights outside a run (llmtrain-export, tests/app/dump_logits).
//
// state.toml's [model] holds GPT-2's five shape keys and the model config hash (docs/configuration.md
// "The model hash"); for another architecture, checkpoints written since issue 30's follow-up also
// hold arch, n_kv_head, intermediate_size and tie_embeddings (resolved) and rope_theta, norm_eps.
// For an older one without them, the run's config.toml (two levels above step_N) has them all; its
// hash must be the checkpoint's, so a config.toml edited since cannot mislabel it.
#pragma once
#include <string>

#include "app/checkpoint/checkpoint.hpp"
#include "app/interop/safetensors.hpp"  // InteropError

namespace llmtrain {

/// The model configuration of checkpoint `ckpt_dir` (state st, read from it): st.model when
/// state.toml records a non-GPT-2 architecture (its keys must hash to st.model_config_hash), with a
/// mixture of experts' model.moe keys taken from its [model_identity] and model.moe.aux_loss_coef
/// from the run's config.toml when that describes it (else the default); else the
/// run's config.toml's model when its model_config_hash is st.model_config_hash; else st.model when
/// that hash is GPT-2's of st.model's shape (a GPT-2 checkpoint without its run directory). Errors:
/// InteropError naming the checkpoint: recorded keys that do not hash to the recorded hash, or none
/// of the above holds (an older checkpoint of another architecture whose run config is missing,
/// unreadable or describes another model).
GPTConfig checkpoint_model_config(const std::string& ckpt_dir, const TrainState& st);

}  // namespace llmtrain
