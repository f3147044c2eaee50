// tests/config/config_test.cpp — load_config, --set overrides, to_toml, resolve_batch,
// and parse_cli against independent references (the model hash and identity: model_identity_test.cpp):
//   - error positions: a '@' marker in the test's TOML text gives the expected line:column;
//   - defaults: the key tables of docs/configuration.md (every key with its default);
//   - batch derivation: a brute-force search over (global, accum) pairs.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "app/config/cli.hpp"
#include "app/config/config.hpp"
#include "app/state/model_state.hpp"
#include "parallel/partition.hpp"

namespace fs = std::filesystem;
using namespace llmtrain;

namespace {

/// A fresh file `name` with `text` in a per-test directory.
std::string write_file(const std::string& name, const std::string& text) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    const fs::path dir = fs::path(testing::TempDir()) / "llmtrain_config_test" / info->name();
    fs::create_directories(dir);
    const fs::path p = dir / name;
    fs::remove(p);  // a locked file left by an earlier run
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
}

/// The ConfigError message of load_config, or "" when it loads.
std::string error_of(const std::string& path, const std::vector<std::string>& overrides = {}) {
    try {
        load_config(path, overrides);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

/// Removes the '@' marker from `text` and returns the marker's 1-based "line:column".
std::string take_marker(std::string& text) {
    const auto at = text.find('@');
    EXPECT_NE(at, std::string::npos) << "test text has no @ marker";
    const auto before = text.substr(0, at);
    const int line = 1 + int(std::count(before.begin(), before.end(), '\n'));
    const auto nl = before.rfind('\n');
    const int col = int(at - (nl == std::string::npos ? 0 : nl + 1)) + 1;
    text.erase(at, 1);
    return std::to_string(line) + ":" + std::to_string(col);
}

struct BadCase {
    const char* what;   // the class of mistake
    std::string toml;   // '@' marks where the error must point
    std::vector<std::string> must_contain;
};

}  // namespace

TEST(Config, EveryBadFileIsReportedAtItsPositionWithTheKey) {
    const std::vector<BadCase> cases = {
        {"unknown section", "[run]\nname = \"x\"\n[@optimiser]\nlr = 1.0\n", {"unknown section [optimiser]", "[optimizer]"}},
        {"unknown key", "[model]\n@n_layers = 4\n", {"model.n_layers: unknown key", "model.n_layer"}},
        {"key in the wrong section", "[training]\n@lr = 1e-3\n", {"training.lr: unknown key", "optimizer.lr"}},
        {"key outside any section", "@max_steps = 5\n", {"max_steps", "inside a [section]", "run.max_steps"}},
        {"section given as a value", "@model = 5\n", {"[model] must be a table"}},
        {"nested table", "[model]\n@inner = { a = 1 }\n", {"model.inner: unknown key"}},
        {"string for an integer", "[run]\nmax_steps = @\"50\"\n", {"run.max_steps", "expected an integer", "string \"50\""}},
        {"float for an integer", "[model]\nn_layer = @4.0\n", {"model.n_layer", "expected an integer", "float 4"}},
        {"bool for an integer", "[run]\nseed = @true\n", {"run.seed", "expected an integer", "boolean true"}},
        {"string for a number", "[optimizer]\nlr = @\"3e-4\"\n", {"optimizer.lr", "expected a number", "string \"3e-4\""}},
        {"bool for a number", "[optimizer]\nlr = @true\n", {"optimizer.lr", "expected a number", "boolean true"}},
        {"number for a string", "[run]\nbackend = @1\n", {"run.backend", "expected a string", "integer 1"}},
        {"number for a bool", "[metrics]\nenabled = @1\n", {"metrics.enabled", "expected true or false"}},
        {"array for a number", "[optimizer]\nlr = @[1.0]\n", {"optimizer.lr", "an array"}},
        {"integer below its minimum", "[run]\nmax_steps = @0\n", {"run.max_steps", "an integer >= 1", "got 0"}},
        {"integer past int range", "[run]\nmax_steps = @2147483648\n", {"run.max_steps", "[-2147483648, 2147483647]"}},
        {"integer range", "[model]\nvocab_size = @1\n", {"model.vocab_size", "[2, 2147483647]", "got 1"}},
        {"negative seed", "[run]\nseed = @-1\n", {"run.seed", ">= 0"}},
        {"float not > 0", "[optimizer]\nlr = @0.0\n", {"optimizer.lr", "a number > 0", "got 0.0"}},
        {"float below 0", "[optimizer]\nweight_decay = @-0.1\n", {"optimizer.weight_decay", "a number >= 0"}},
        {"half-open interval", "[optimizer]\nbeta2 = @1.0\n", {"optimizer.beta2", "[0, 1)", "got 1.0"}},
        {"closed interval", "[activation_checkpoint]\nratio = @1.5\n", {"activation_checkpoint.ratio", "[0, 1]"}},
        {"float overflow", "[optimizer]\nlr = @1e39\n", {"optimizer.lr", "32-bit float"}},
        {"float underflow", "[optimizer]\nlr = @1e-50\n", {"optimizer.lr", "32-bit float"}},
        {"nan", "[training]\ngrad_clip = @nan\n", {"training.grad_clip", "finite"}},
        {"inf", "[run]\npeak_flops = @inf\n", {"run.peak_flops", "finite"}},
        {"enum", "[run]\nbackend = @\"tpu\"\n", {"run.backend", "one of \"cpu\", \"cuda\", \"auto\"", "\"tpu\""}},
        {"enum", "[lr_schedule]\ndecay = @\"step\"\n", {"lr_schedule.decay", "\"cosine\""}},
        {"empty string", "[run]\nrun_dir = @\"\"\n", {"run.run_dir", "non-empty"}},
        {"bare port", "[metrics]\nlisten = @\"9400\"\n", {"metrics.listen", "host:port", "bare port"}},
        {"port too large", "[metrics]\nlisten = @\"127.0.0.1:70000\"\n", {"metrics.listen", "[0, 65535]"}},
        {"bad host", "[metrics]\nlisten = @\"a b:9400\"\n", {"metrics.listen", "host:port"}},
        {"n_head not dividing n_embd", "[model]\nn_embd = 256\nn_head = @3\n",
         {"model.n_head", "divisor of model.n_embd (256)", "got 3"}},
        {"min_lr above lr", "[optimizer]\nlr = 1e-4\n[lr_schedule]\nmin_lr = @1e-3\n", {"lr_schedule.min_lr", "[0, optimizer.lr"}},
        {"bf16 on the cpu", "[training]\nprecision = @\"bf16\"\n", {"training.precision", "cuda"}},
        {"cudnn on the cpu", "[model]\nattention = @\"cudnn\"\n", {"model.attention", "cuda"}},
        {"cublas on the cpu", "[model]\nattention = @\"cublas\"\n", {"model.attention", "cuda"}},
        {"nccl on the cpu", "[parallel]\ncomm = @\"nccl\"\n", {"parallel.comm", "\"auto\" or \"mpi\"", "got \"nccl\""}},
        {"unknown comm", "[run]\nbackend = \"cuda\"\n[parallel]\ncomm = @\"gloo\"\n",
         {"parallel.comm", "one of \"auto\", \"nccl\", \"mpi\"", "\"gloo\""}},
        {"unknown attention", "[model]\nattention = @\"flash\"\n",
         {"model.attention", "one of \"auto\", \"native\", \"cublas\", \"cudnn\"", "\"flash\""}},
        {"attention workspace of 0 MiB", "[model]\nattention_workspace_mb = @0\n",
         {"model.attention_workspace_mb", "an integer >= 1", "got 0"}},
        {"stochastic rounding in fp32", "[run]\nbackend = \"cuda\"\n[training]\nstochastic_rounding = @true\n",
         {"training.stochastic_rounding", "expected false", "\"fp32\""}},
        {"top_k above vocab", "[model]\nvocab_size = 16\n[run]\nsample_top_k = @40\n", {"run.sample_top_k", "model.vocab_size = 16"}},
        {"global batch not a multiple", "[training]\nmicro_batch_size = 4\ngrad_accum_steps = 2\nglobal_batch_size = @12\n",
         {"training.global_batch_size", "multiple of", "8", "got 12"}},
        // Lists and the pipeline (parallel/partition.hpp's stage_plan checks the per-stage lists).
        {"number for a list", "[pipeline]\nlayers_per_stage = @4\n",
         {"pipeline.layers_per_stage: expected an array (in brackets, e.g. [4]), got the integer 4"}},
        {"string in a list", "[activation_checkpoint]\nratio_per_stage = @[0.5, \"x\"]\n",
         {"activation_checkpoint.ratio_per_stage[1]: expected a number, got the string \"x\""}},
        {"stage with no layer", "[parallel]\npp = 2\n[pipeline]\nlayers_per_stage = @[0, 4]\n",
         {"pipeline.layers_per_stage[0]: expected an integer >= 1, got 0"}},
        {"ratio in a list out of range", "[activation_checkpoint]\nratio_per_stage = @[1.5]\n",
         {"activation_checkpoint.ratio_per_stage[0]: expected a number in [0, 1], got 1.5"}},
        {"negative checkpointed count", "[activation_checkpoint]\nlayers_per_stage = @[-1]\n",
         {"activation_checkpoint.layers_per_stage[0]: expected an integer >= 0, got -1"}},
        {"unknown schedule", "[pipeline]\nschedule = @\"interleaved\"\n",
         {"pipeline.schedule: expected one of \"1f1b\", \"gpipe\", got \"interleaved\""}},
        {"layers_per_stage of the wrong length", "[parallel]\npp = 2\n[pipeline]\nlayers_per_stage = @[1, 1, 2]\n",
         {"pipeline.layers_per_stage: expected 2 entries (one per stage, parallel.pp = 2)", "got 3"}},
        {"layers_per_stage of the wrong sum", "[parallel]\npp = 2\n[pipeline]\nlayers_per_stage = @[1, 2]\n",
         {"pipeline.layers_per_stage: expected entries summing to model.n_layer = 4", "(sum 3)"}},
        {"ratio list of the wrong length", "[parallel]\npp = 2\n[activation_checkpoint]\nratio_per_stage = @[0.5]\n",
         {"activation_checkpoint.ratio_per_stage: expected 2 entries", "got 1"}},
        {"count list of the wrong length", "[parallel]\npp = 2\n[activation_checkpoint]\nlayers_per_stage = @[1, 1, 1]\n",
         {"activation_checkpoint.layers_per_stage: expected 2 entries", "got 3"}},
        {"count above its stage's layers",
         "[parallel]\npp = 2\n[pipeline]\nlayers_per_stage = [1, 3]\n[activation_checkpoint]\nlayers_per_stage = @[2, 0]\n",
         {"activation_checkpoint.layers_per_stage[0]: expected an integer in [0, 1]", "got 2"}},
        {"more stages than layers", "[model]\nn_layer = 2\n[parallel]\npp = @3\n",
         {"parallel.pp: expected an integer in [1, model.n_layer = 2]", "got 3"}},
        {"ZeRO-2 with a pipeline", "[parallel]\npp = 2\nzero_stage = @2\n",
         {"parallel.zero_stage: ZeRO-2/3 need one micro-batch's gradients per unit", "use zero_stage 0 or 1"}},
        {"ZeRO-3 with a pipeline", "[parallel]\nzero_stage = @3\npp = 2\n",
         {"parallel.zero_stage: ZeRO-2/3"}},
        {"tp not dividing the heads", "[model]\nn_head = 6\nn_embd = 48\n[parallel]\ntp = @4\n",
         {"parallel.tp: expected a divisor of model.n_head = 6", "got 4"}},
        {"tp not dividing the padded vocabulary", "[parallel]\ntp = @256\n[model]\nn_head = 256\nn_embd = 256\nvocab_size = 100\n",
         {"parallel.tp: expected a divisor of the padded vocabulary", "got 256"}},
        {"tp of zero", "[parallel]\ntp = @0\n", {"parallel.tp: expected an integer >= 1", "got 0"}},
        {"sequence parallelism without tp", "[parallel]\nsequence_parallel = @true\n",
         {"parallel.sequence_parallel: expected false with parallel.tp = 1", "got true"}},
        {"sequence parallelism over rows that do not split",
         "[training]\nmicro_batch_size = 1\n[model]\nseq_len = 6\nn_head = 4\n[parallel]\ntp = 4\nsequence_parallel = @true\n",
         {"parallel.sequence_parallel: expected micro_batch_size x seq_len = 6 to be a multiple of parallel.tp = 4"}},
    };
    for (const auto& c : cases) {
        std::string text = c.toml;
        const std::string pos = take_marker(text);
        const std::string path = write_file("bad.toml", text);
        const std::string err = error_of(path);
        ASSERT_FALSE(err.empty()) << c.what << ": loaded without error:\n" << text;
        EXPECT_EQ(err.rfind(path + ":" + pos + ": ", 0), 0u) << c.what << ": expected position " << pos << " in: " << err;
        for (const auto& s : c.must_contain) EXPECT_NE(err.find(s), std::string::npos) << c.what << ": '" << s << "' not in: " << err;
    }
}

TEST(Config, SyntaxErrorsNameFileLineAndColumn) {
    // TOML++ points at the offending character; the line is what matters and what we check exactly.
    const std::vector<std::pair<std::string, int>> cases = {
        {"[run]\nmax_steps = 5\nname = \"unterminated\n", 3},
        {"[model]\nn_layer = 4\nn_layer = 5\n", 3},  // duplicate key
        {"[run]\n\n\nmax_steps = = 5\n", 4},
        {"[model\nn_layer = 4\n", 1},
    };
    for (const auto& [text, line] : cases) {
        const std::string path = write_file("syntax.toml", text);
        const std::string err = error_of(path);
        const std::string prefix = path + ":" + std::to_string(line) + ":";
        ASSERT_EQ(err.rfind(prefix, 0), 0u) << text << "\n-> " << err;
        EXPECT_TRUE(std::regex_match(err.substr(prefix.size()), std::regex("[0-9]+: TOML syntax error: .+")))
            << text << "\n-> " << err;
    }
}

TEST(Config, MissingFileAndDirectoryAreNamed) {
    const std::string missing = (fs::path(testing::TempDir()) / "no_such_dir" / "none.toml").string();
    std::string err = error_of(missing);
    EXPECT_EQ(err.rfind(missing + ": cannot open config file", 0), 0u) << err;

    const std::string dir = fs::path(write_file("x.toml", "")).parent_path().string();
    err = error_of(dir);
    EXPECT_EQ(err.rfind(dir + ": cannot read config file", 0), 0u) << err;
}

TEST(Config, UnreadableFileIsNamed) {
    const std::string locked = write_file("locked.toml", "[run]\nmax_steps = 5\n");
    fs::permissions(locked, fs::perms::none);
    if (std::ifstream(locked).good()) GTEST_SKIP() << "running as root: permissions do not stop reads";
    const std::string err = error_of(locked);
    EXPECT_EQ(err.rfind(locked + ": cannot open config file: Permission denied", 0), 0u) << err;
}

TEST(Config, BadOverridesAreNamed) {
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"run.max_steps", {"--set run.max_steps: ", "section.key=value"}},
        {"max_steps=5", {"--set max_steps=5: ", "section.key=value"}},
        {"run.max_stepz=5", {"--set run.max_stepz=...: unknown key", "run.max_steps"}},
        {"nosuch.key=5", {"--set nosuch.key=...: unknown key"}},
        {"run.name=demo", {"--set run.name=demo: run.name: the value is not valid TOML", "quotes"}},
        {"run.max_steps=\"5\"", {"--set run.max_steps=\"5\": run.max_steps: expected an integer"}},
        {"run.max_steps=0", {"--set run.max_steps=0: run.max_steps: expected an integer >= 1"}},
        {"run.max_steps=5\nrun.seed=3", {"expected exactly one TOML value"}},
        {"model.n_head=5", {"--set model.n_head=5: model.n_head: expected a divisor"}},
        {"pipeline.layers_per_stage=[1, -1]",
         {"--set pipeline.layers_per_stage=[1, -1]: pipeline.layers_per_stage[1]: expected an integer >= 1, got -1"}},
    };
    for (const auto& [ov, parts] : cases) {
        const std::string err = error_of("", {ov});
        ASSERT_FALSE(err.empty()) << ov;
        for (const auto& s : parts) EXPECT_NE(err.find(s), std::string::npos) << "'" << s << "' not in: " << err;
    }
}

TEST(Config, OverridesApplyInOrderOverTheFile) {
    const std::string path = write_file("c.toml", "[run]\nmax_steps = 10\nname = \"file\"\n[optimizer]\nlr = 0.5\n");
    const Config c = load_config(path, {"run.max_steps=20", "run.name=\"cli\"", "run.max_steps = 30",
                                        "optimizer.lr=1", "training.precision = 'fp32'"});
    EXPECT_EQ(c.run.max_steps, 30);
    EXPECT_EQ(c.run.name, "cli");
    EXPECT_EQ(c.optimizer.lr, 1.0f);  // an integer for a float key is that float
    EXPECT_EQ(c.model.n_layer, Config{}.model.n_layer);
}

TEST(Config, IntegerForAFloatKeyIsTheSameFloat) {
    const std::string a = write_file("a.toml", "[optimizer]\nlr = 2\nweight_decay = 0\n");
    const std::string b = write_file("b.toml", "[optimizer]\nlr = 2.0\nweight_decay = 0.0\n");
    EXPECT_EQ(load_config(a, {}), load_config(b, {}));
}

TEST(Config, AttentionAcceptsAutoAndEachPath) {
    EXPECT_EQ(Config{}.model.attention, "auto");  // the default: resolved by the backend at start-up
    const auto attention = [](const char* backend, const char* a) {
        const std::string set_backend = std::string("run.backend=\"") + backend + "\"";
        return load_config("", {set_backend, std::string("model.attention=\"") + a + "\""}).model.attention;
    };
    for (const char* a : {"auto", "native", "cublas", "cudnn"}) EXPECT_EQ(attention("cuda", a), a);
    for (const char* a : {"auto", "native"}) EXPECT_EQ(attention("cpu", a), a);  // the cpu's one attention, either name
}

TEST(Config, CommAcceptsEachValueWhereItApplies) {
    EXPECT_EQ(Config{}.parallel.comm, "auto");  // nccl on cuda, mpi on cpu (parallel/comm.hpp make_comm)
    const auto comm = [](const char* backend, const char* c) {
        const std::string set_backend = std::string("run.backend=\"") + backend + "\"";
        return load_config("", {set_backend, std::string("parallel.comm=\"") + c + "\""}).parallel.comm;
    };
    for (const char* c : {"auto", "nccl", "mpi"}) EXPECT_EQ(comm("cuda", c), c);
    for (const char* c : {"auto", "mpi"}) EXPECT_EQ(comm("cpu", c), c);
}

TEST(Config, LlamaKeysNameTheKeyAtFault) {
    // model.arch and its keys (model/arch.hpp): every mistake names the key, exit 2 (ConfigError).
    const auto msg = [](std::vector<std::string> sets) {
        try {
            load_config("", sets);
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string llama = "model.arch=\"llama\"";
    EXPECT_NE(msg({llama, "model.n_kv_head=3"}).find("model.n_kv_head: expected a divisor of model.n_head (4)"),
              std::string::npos);
    EXPECT_NE(msg({llama, "model.n_head=2", "model.n_embd=30"}).find("head size model.n_embd / model.n_head = 30 / 2 = 15"),
              std::string::npos);
    EXPECT_NE(msg({"model.tie_embeddings=false"}).find("model.tie_embeddings: expected true with model.arch = \"gpt2\""),
              std::string::npos);
    EXPECT_NE(msg({"model.n_kv_head=2"}).find("model.n_kv_head: expected 0 or model.n_head (4)"), std::string::npos);
    EXPECT_NE(msg({"model.intermediate_size=100"}).find("model.intermediate_size: expected 0 or 4 x model.n_embd"),
              std::string::npos);
    EXPECT_NE(msg({"model.norm_eps=1e-6"}).find("model.norm_eps: expected 1e-5 with model.arch = \"gpt2\""),
              std::string::npos);
    EXPECT_NE(msg({"model.arch=\"llama3\""}).find("model.arch: expected one of"), std::string::npos);
    EXPECT_NE(msg({llama, "model.n_kv_head=2", "parallel.tp=4"}).find("parallel.tp: expected a divisor of model.n_kv_head"),
              std::string::npos);
    EXPECT_NE(msg({llama, "model.intermediate_size=100", "parallel.tp=8", "model.n_head=8"})
                  .find("parallel.tp: expected a divisor of model.intermediate_size"),
              std::string::npos);
    // Qwen3's keys: llama only, qk_norm without tp, both on cpu and cuda; head_dim frees n_embd from n_head.
    EXPECT_NE(msg({"model.qk_norm=true"}).find("model.qk_norm: QK-norm is a Llama-family piece"), std::string::npos);
    EXPECT_NE(msg({"model.head_dim=16"}).find("model.head_dim: expected 0 or n_embd / n_head (64)"), std::string::npos);
    // Both run on cuda too (model/cuda/qk_norm.cu; the cuda attention takes n_head x head_dim).
    const Config qwen3_cuda =
        load_config("", {llama, "model.qk_norm=true", "model.head_dim=16", "run.backend=\"cuda\""});
    EXPECT_TRUE(qwen3_cuda.model.qk_norm);
    EXPECT_EQ(qwen3_cuda.model.head_dim, 16);
    EXPECT_NE(msg({llama, "model.qk_norm=true", "parallel.tp=2"}).find("model.qk_norm: tensor parallelism"),
              std::string::npos);
    EXPECT_NE(msg({llama, "model.head_dim=7"}).find("model.head_dim: rotary positions turn pairs"), std::string::npos);
    EXPECT_EQ(load_config("", {llama, "model.n_embd=30", "model.n_head=4", "model.head_dim=8", "model.qk_norm=true"})
                  .model.head_dim, 8);
    // The identity: qk_norm and a head_dim other than n_embd / n_head are in it, the defaults leave it as it was.
    const auto id = [](std::vector<std::string> sets) { return model_identity(gpt_config_of(load_config("", sets))); };
    EXPECT_EQ(id({llama, "model.head_dim=64"}), id({llama}));
    EXPECT_EQ(id({llama, "model.qk_norm=true"}).back(), (std::pair<std::string, std::string>{"qk_norm", "true"}));
    EXPECT_EQ(id({llama, "model.head_dim=32"}).back(), (std::pair<std::string, std::string>{"head_dim", "32"}));
    // A mixture of experts runs with a pipeline and, per stage, expert parallelism (issue 45) on both
    // backends (cuda: tests/cuda/emu_moe_pp.sh); still refused with training.fp8.
    const std::string moe = "model.moe.n_experts=4";
    EXPECT_EQ(load_config("", {llama, moe, "parallel.pp=2", "parallel.ep=2"}).parallel.pp, 2);
    EXPECT_EQ(load_config("", {llama, moe, "parallel.pp=2", "run.backend=\"cuda\""}).parallel.pp, 2);
    EXPECT_NE(msg({llama, moe, "parallel.pp=2", "training.fp8=\"tensorwise\""})
                  .find("model.moe.n_experts: mixture of experts does not run with training.fp8 yet"),
              std::string::npos);
    // A mixture of experts runs with tp (and sequence parallelism) and cp on the cpu backend, ep beside both
    // (docs/parallelism.md "Mixture of experts under tp and cp") and on cuda (tests/cuda/emu_moe_tp_cp.sh);
    // ep runs beside tp.
    const std::string moe4 = "model.moe.n_experts=4";
    EXPECT_EQ(load_config("", {llama, moe4, "parallel.tp=2", "parallel.sequence_parallel=true"}).parallel.tp, 2);
    EXPECT_EQ(load_config("", {llama, moe4, "parallel.cp=2", "parallel.ep=2"}).parallel.cp, 2);
    EXPECT_EQ(load_config("", {llama, moe4, "parallel.cp=2", "run.backend=\"cuda\"", "model.moe.aux_loss_coef=0"})
                  .parallel.cp, 2);
    EXPECT_EQ(load_config("", {llama, moe4, "parallel.tp=2", "run.backend=\"cuda\""}).parallel.tp, 2);
    EXPECT_EQ(load_config("", {llama, moe4, "parallel.cp=2", "run.backend=\"cuda\""}).parallel.cp, 2);
    EXPECT_EQ(load_config("", {llama, moe4, "parallel.tp=2", "parallel.ep=2"}).parallel.ep, 2);
    // A valid Llama: multi-query and untied.
    const Config c = load_config("", {llama, "model.n_kv_head=1", "model.tie_embeddings=false"});
    EXPECT_EQ(c.model.arch, "llama");
    // The hash: GPT-2's text unchanged (the checkpoint format), Llama's differs from GPT-2's and by shape.
    EXPECT_EQ(model_config_hash(load_config("", {})), model_config_hash(load_config("", {"model.attention=\"native\""})));
    EXPECT_NE(model_config_hash(load_config("", {llama})), model_config_hash(load_config("", {})));
    EXPECT_NE(model_config_hash(load_config("", {llama})), model_config_hash(c));
}

TEST(Config, DefaultsMatchTheDocumentedTable) {
    // docs/configuration.md: "#... [section]" headings, then rows "| `key` | `default` | range | meaning |".
    std::ifstream docs(std::string(LLMTRAIN_SOURCE_DIR) + "/docs/configuration.md");
    ASSERT_TRUE(docs) << "docs/configuration.md not found";
    std::map<std::string, std::string> documented;
    std::string line, section;
    const std::regex heading(R"(^#+ \[([a-z_.]+)\].*)"), row(R"(^\| `([a-z_0-9]+)` \| `([^`]*)` \|.*)");
    std::smatch m;
    while (std::getline(docs, line)) {
        if (std::regex_match(line, m, heading)) {
            section = m[1];
        } else if (std::regex_match(line, m, row)) {
            documented[section + "." + m[1].str()] = m[2];
        }
    }
    std::map<std::string, std::string> actual;
    std::istringstream toml(to_toml(Config{}));
    const std::regex sec_line(R"(^\[([a-z_.]+)\]$)"), kv(R"(^([a-z_0-9]+) = (.*)$)");
    while (std::getline(toml, line)) {
        if (std::regex_match(line, m, sec_line)) {
            section = m[1];
        } else if (std::regex_match(line, m, kv)) {
            actual[section + "." + m[1].str()] = m[2];
        }
    }
    EXPECT_EQ(actual.size(), 98u);  // keep in step with the key table in config.cpp
    EXPECT_EQ(documented, actual);
    // An empty file and empty sections are the defaults too.
    EXPECT_EQ(load_config(write_file("empty.toml", ""), {}), Config{});
    EXPECT_EQ(load_config(write_file("sections.toml", "[run]\n[model]\n[metrics]\n"), {}), Config{});
    EXPECT_EQ(load_config("", {}), Config{});
}

TEST(Config, GradReduceDtypeFollowsThePrecisionUnlessSet) {
    // Unset, gradients travel in the training precision (bf16: no cast path); set, it stays as given,
    // from a file or an override.
    const std::string bf16 = "training.precision=\"bf16\"", cuda = "run.backend=\"cuda\"";
    EXPECT_EQ(load_config("", {}).parallel.grad_reduce_dtype, "fp32");
    EXPECT_EQ(load_config("", {bf16, cuda}).parallel.grad_reduce_dtype, "bf16");
    EXPECT_EQ(load_config("", {bf16, cuda, "parallel.grad_reduce_dtype=\"fp32\""}).parallel.grad_reduce_dtype, "fp32");
    const std::string f = write_file("wire.toml", "[run]\nbackend = \"cuda\"\n[training]\nprecision = \"bf16\"\n"
                                                  "[parallel]\ngrad_reduce_dtype = \"fp32\"\n");
    EXPECT_EQ(load_config(f, {}).parallel.grad_reduce_dtype, "fp32");
    EXPECT_EQ(load_config("", {"parallel.grad_reduce_dtype=\"bf16\""}).parallel.grad_reduce_dtype, "bf16");
}

TEST(Config, RoundTripOfEveryKey) {
    // Every key set away from its default, then printed and loaded back.
    const std::vector<std::string> all = {
        "run.name=\"r \\\"q\\\" \\\\ \\t é\"", "run.run_dir=\"/tmp/x y\"", "run.backend=\"cuda\"",
        "run.seed=9223372036854775807", "run.max_steps=7", "run.log_interval=3", "run.eval_interval=0",
        "run.eval_steps=0", "run.sample_interval=0", "run.sample_tokens=5", "run.sample_top_k=1",
        "run.sample_temperature=0.7", "run.peak_flops=989e12", "model.n_layer=12", "model.n_head=12",
        "model.n_embd=768", "model.seq_len=1024", "model.vocab_size=50257", "model.attention=\"cudnn\"",
        "model.attention_workspace_mb=64",
        "data.train=\"a.h5\"", "data.val=\"b.h5\"", "training.micro_batch_size=3", "training.global_batch_size=12",
        "training.grad_accum_steps=2", "training.precision=\"bf16\"", "training.grad_clip=0",
        "training.stochastic_rounding=true", "training.max_skipped_steps=3",
        "optimizer.lr=3e-4", "optimizer.beta1=0", "optimizer.beta2=0.999", "optimizer.eps=1e-6",
        "optimizer.weight_decay=0", "lr_schedule.decay=\"linear\"", "lr_schedule.warmup_steps=0",
        "lr_schedule.min_lr=3e-5", "parallel.dp=2", "parallel.tp=2", "parallel.sequence_parallel=true", "parallel.zero_stage=3", "parallel.zero_group_size=2",
        "parallel.grad_reduce_dtype=\"bf16\"", "parallel.timeout_s=30", "pipeline.layers_per_stage=[12]",
        "pipeline.schedule=\"gpipe\"", "pipeline.plan_memory_gib=1.5", "activation_checkpoint.ratio=1", "activation_checkpoint.ratio_per_stage=[0.3]",
        "activation_checkpoint.layers_per_stage=[5]",
        "checkpoint.interval=0", "checkpoint.at_end=false", "checkpoint.keep_last=0", "checkpoint.resume=\"runs/x/checkpoints/step_5\"", "checkpoint.overwrite=true",
        "metrics.enabled=false", "metrics.listen=\"localhost:0\""};
    const Config c = load_config("", all);
    // Each override changed exactly its own line of the printout.
    std::istringstream a(to_toml(Config{})), b(to_toml(c));
    std::string la, lb;
    int differing = 0;
    while (std::getline(a, la) && std::getline(b, lb)) differing += la != lb;
    EXPECT_EQ(differing, int(all.size()));
    EXPECT_EQ(load_config(write_file("rt.toml", to_toml(c)), {}), c);
    EXPECT_EQ(load_config(write_file("rt0.toml", to_toml(Config{})), {}), Config{});
}

TEST(Config, PerStageListsPrintAndLoadBack) {
    // Three stages: the printed lists are the TOML arrays written here, and load back equal (0.1f
    // bit for bit).
    Config c;
    c.model.n_layer = 12;
    c.parallel.pp = 3;
    c.pipeline.layers_per_stage = {3, 4, 5};
    c.activation_checkpoint.ratio_per_stage = {0.1f, 1.0f, 0.0f};
    c.activation_checkpoint.layers_per_stage = {3, 0, 5};
    const std::string text = to_toml(c);
    for (const char* line : {"\nlayers_per_stage = [3, 4, 5]\n", "\nratio_per_stage = [0.1, 1.0, 0.0]\n",
                             "\nlayers_per_stage = [3, 0, 5]\n"})
        EXPECT_NE(text.find(line), std::string::npos) << line << " not in:\n" << text;
    EXPECT_EQ(load_config(write_file("pp3.toml", text), {}), c);
    // An empty array is the default, and an integer is accepted as a float element.
    const Config lists = load_config(write_file("l.toml", "[pipeline]\nlayers_per_stage = []\n"
                                                          "[activation_checkpoint]\nratio_per_stage = [1]\n"), {});
    EXPECT_TRUE(lists.pipeline.layers_per_stage.empty());
    EXPECT_EQ(lists.activation_checkpoint.ratio_per_stage, std::vector<float>{1.0f});
}

TEST(Config, CheckpointedCountIsCheckedAgainstTheBalancedSplit) {
    // No pipeline.layers_per_stage: the counts are checked against the default split of
    // model.n_layer for micro_batch_size x seq_len (parallel/partition.hpp), named in the message.
    Config c;
    const std::vector<int> split =
        balanced_layers_per_stage(gpt_config_of(c), c.training.micro_batch_size, c.model.seq_len, 2);
    const std::string split_text = "[" + std::to_string(split[0]) + ", " + std::to_string(split[1]) + "]";
    const std::string over = "[0, " + std::to_string(split[1] + 1) + "]", fits = "[0, " + std::to_string(split[1]) + "]";
    std::string text = "[parallel]\npp = 2\n[activation_checkpoint]\nlayers_per_stage = @" + over + "\n";
    const std::string pos = take_marker(text);
    const std::string path = write_file("over.toml", text);
    const std::string err = error_of(path);
    EXPECT_EQ(err.rfind(path + ":" + pos + ": activation_checkpoint.layers_per_stage[1]: expected an integer in [0, " +
                            std::to_string(split[1]) + "] (the stage's layers in the balanced split " + split_text +
                            "), got " + std::to_string(split[1] + 1),
                        0),
              0u)
        << err;
    // The largest valid count loads.
    const Config ok = load_config("", {"parallel.pp=2", "activation_checkpoint.layers_per_stage=" + fits});
    EXPECT_EQ(ok.activation_checkpoint.layers_per_stage, (std::vector<int>{0, split[1]}));
}

TEST(Config, FloatsRoundTripBitExactly) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> log10(-30, 30);
    for (int i = 0; i < 300; ++i) {
        Config c;
        c.optimizer.lr = static_cast<float>(std::pow(10.0, log10(rng)));
        c.lr_schedule.min_lr = c.optimizer.lr * std::uniform_real_distribution<float>(0, 1)(rng);
        c.run.peak_flops = std::pow(10.0, log10(rng) + 10);
        const Config back = load_config(write_file("f.toml", to_toml(c)), {});
        ASSERT_EQ(back.optimizer.lr, c.optimizer.lr) << to_toml(c);
        ASSERT_EQ(back.lr_schedule.min_lr, c.lr_schedule.min_lr);
        ASSERT_EQ(back.run.peak_flops, c.run.peak_flops);
    }
}

TEST(Config, ResolveBatchMatchesBruteForce) {
    // Reference: the unique (global, accum) with global = micro * dp * accum, accum >= 1, that agrees
    // with every key the user set (0 = unset; neither set means accum = 1); an error if none exists.
    for (int micro = 1; micro <= 3; ++micro)
        for (int dp = 1; dp <= 4; ++dp)
            for (int global = 0; global <= 30; ++global)
                for (int accum = 0; accum <= 4; ++accum) {
                    int want_g = -1, want_a = -1;
                    for (int a = 1; a <= 30 && want_a < 0; ++a) {
                        const int g = micro * dp * a;
                        const bool ok = (global == 0 || g == global) && (accum == 0 || a == accum) &&
                                        (global != 0 || accum != 0 || a == 1);
                        if (ok) want_g = g, want_a = a;
                    }
                    Config c;
                    c.training.micro_batch_size = micro;
                    c.training.global_batch_size = global;
                    c.training.grad_accum_steps = accum;
                    if (want_a < 0) {
                        EXPECT_THROW(resolve_batch(c, dp), ConfigError) << micro << " " << dp << " " << global << " " << accum;
                    } else {
                        ASSERT_NO_THROW(resolve_batch(c, dp));
                        EXPECT_EQ(c.training.global_batch_size, want_g);
                        EXPECT_EQ(c.training.grad_accum_steps, want_a);
                    }
                }
    Config c;
    EXPECT_THROW(resolve_batch(c, 0), ConfigError);
    c.training.micro_batch_size = 16;
    c.training.global_batch_size = 48;
    try {
        resolve_batch(c, 2);
        FAIL() << "48 is not a multiple of 16 x 2";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("training.global_batch_size"), std::string::npos) << e.what();
    }
}

TEST(Configs, ShippedConfigsLoadWithGpt2Shapes) {
    struct Shipped {
        const char* file;
        int n_layer, n_head, n_embd, seq_len, vocab_size;
        double params;  // published GPT-2 parameter counts (tied wte), and the tiny model's
    };
    const std::vector<Shipped> shipped = {{"tiny", 4, 4, 256, 256, 8192, 0},
                                          {"gpt2-124m", 12, 12, 768, 1024, 50257, 124439808},
                                          {"gpt2-350m", 24, 16, 1024, 1024, 50257, 354823168},
                                          {"gpt2-774m", 36, 20, 1280, 1024, 50257, 774030080},
                                          {"gpt2-1.5b", 48, 25, 1600, 1024, 50257, 1557611200}};
    for (const auto& s : shipped) {
        const std::string path = std::string(LLMTRAIN_SOURCE_DIR) + "/configs/" + s.file + ".toml";
        Config c;
        ASSERT_NO_THROW(c = load_config(path, {})) << path;
        const auto& m = c.model;
        EXPECT_EQ(m.n_layer, s.n_layer) << path;
        EXPECT_EQ(m.n_head, s.n_head) << path;
        EXPECT_EQ(m.n_embd, s.n_embd) << path;
        EXPECT_EQ(m.seq_len, s.seq_len) << path;
        EXPECT_EQ(m.vocab_size, s.vocab_size) << path;
        // wte + wpe + per layer (2 LayerNorms, qkv, proj, fc, fc proj: 12C^2 + 13C) + ln_f
        const double C = m.n_embd, params = double(m.vocab_size) * C + double(m.seq_len) * C +
                                            m.n_layer * (12 * C * C + 13 * C) + 2 * C;
        const bool gpu = s.params > 0;
        if (gpu) {
            EXPECT_EQ(params, s.params) << path;
        }
        EXPECT_EQ(c.run.backend, gpu ? "cuda" : "cpu") << path;
        EXPECT_EQ(c.training.precision, gpu ? "bf16" : "fp32") << path;
        EXPECT_EQ(c.metrics.listen, "127.0.0.1:9400") << path;
        for (int dp : {1, 2, 4, 8}) {
            Config r = c;
            if (!gpu && dp > 1) continue;  // tiny fixes grad_accum_steps, its global batch follows dp
            ASSERT_NO_THROW(resolve_batch(r, dp)) << path << " dp " << dp;
            if (gpu) {
                EXPECT_EQ(r.training.global_batch_size, c.training.global_batch_size) << path;
            }
        }
    }
}

namespace {
CliArgs parse(std::vector<const char*> argv) {
    argv.insert(argv.begin(), "llmtrain");
    return parse_cli(int(argv.size()), argv.data());
}
}  // namespace

TEST(Cli, FlagsAndRepeatedOverrides) {
    const CliArgs a = parse({"--config", "c.toml", "--set", "run.max_steps=5", "--set=run.name=\"x\"",
                             "--print-config", "--dry-run"});
    EXPECT_FALSE(a.exit_now);
    EXPECT_EQ(a.config_path, "c.toml");
    EXPECT_EQ(a.overrides, (std::vector<std::string>{"run.max_steps=5", "run.name=\"x\""}));
    EXPECT_TRUE(a.print_config);
    EXPECT_TRUE(a.dry_run);
    const CliArgs none = parse({});
    EXPECT_FALSE(none.exit_now);
    EXPECT_TRUE(none.config_path.empty());
    EXPECT_FALSE(none.print_config || none.dry_run);
}

TEST(Cli, HelpAndVersionExitZeroUsageErrorsExitTwo) {
    for (auto argv : std::vector<std::vector<const char*>>{{"--help"}, {"--version"}}) {
        const CliArgs a = parse(argv);
        EXPECT_TRUE(a.exit_now) << argv[0];
        EXPECT_EQ(a.exit_code, kExitOk) << argv[0];
    }
    for (auto argv : std::vector<std::vector<const char*>>{
             {"--bogus"}, {"--config"}, {"stray"}, {"--set", "a.b=1", "c.d=2"}, {"--set"}}) {
        const CliArgs a = parse(argv);
        EXPECT_TRUE(a.exit_now) << argv[0];
        EXPECT_EQ(a.exit_code, kExitUsage) << argv[0];
    }
}

TEST(Cli, WorldSizeMustBePositiveAndTheErrorSaysSo) {
    for (const char* v : {"0", "-1", "x", "2x"}) {
        testing::internal::CaptureStderr();
        const CliArgs a = parse({"--dry-run", "--world-size", v});
        const std::string err = testing::internal::GetCapturedStderr();
        EXPECT_TRUE(a.exit_now) << v;
        EXPECT_EQ(a.exit_code, kExitUsage) << v;
        EXPECT_NE(err.find(std::string("--world-size: expected a number > 0, got ") + v), std::string::npos) << err;
    }
    EXPECT_EQ(parse({"--dry-run", "--world-size", "64"}).world_size, 64);
}
