// app/eval/eval_main.cpp — llmtrain-eval: a model scored on a task (docs/evaluation.md "llmtrain-eval").
//
//   llmtrain-eval MODEL --task val [--data FILE.h5] [--micro-batch B] [--seq-len T] [--n N]
//   llmtrain-eval MODEL --task hellaswag [--items FILE] [--n N] [--tokenizer FILE | --data FILE.h5]
//                 [--micro-batch B] [--per-item OUT.tsv]
//   common: [--backend cpu|cuda] [--precision fp32|bf16]
//
// MODEL: a checkpoint directory, a run directory (its newest checkpoint that verifies), or weights as
// model.init_from takes them (an llm.c model file, a HuggingFace GPT-2 or Llama). val: the mean loss and
// perplexity over the non-overlapping windows of a token dataset (default: the run's data.val), in
// micro-batches of the run's micro_batch_size, as the trainer's val eval with eval_steps = 0 (the
// same number). hellaswag: accuracy over the items (default: the project's copy of the validation
// split, all 10,042) scored as llm.c does (app/eval/hellaswag.hpp). Exit codes as llmtrain's
// (app/config/cli.hpp): 0 scored, 1 a bad model, data or item, 2 bad flags.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "app/config/cli.hpp"
#include "app/eval/eval_model.hpp"
#include "app/eval/hellaswag.hpp"
#include "app/report/run_log.hpp"
#include "data/loader.hpp"
#include "data/token_dataset.hpp"
#include "model/backend.hpp"
#include "model/gpt.hpp"

using namespace llmtrain;

namespace {

struct Args {
    std::string model, task, data, tokenizer, items, per_item, backend = "cpu", precision = "fp32";
    int micro_batch = 0, seq_len = 0;
    long long n = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// A GPT of micro-batch (B, T) holding the weights, on the asked backend.
struct EvalGpt {
    std::unique_ptr<Ops> ops;
    std::unique_ptr<Allocator> alloc;
    std::unique_ptr<GPT> gpt;
    EvalGpt(const Args& a, const EvalWeights& w, int B, int T) {
        ops = make_backend(a.backend, a.precision);
        alloc = std::make_unique<Allocator>(*ops);
        GPTOptions opt;
        opt.B = B;
        opt.T = T;
        gpt = std::make_unique<GPT>(w.model, opt, *alloc);
        gpt->store().load_params(w.params.data());
    }
};

int task_val(const Args& a, const EvalWeights& w) {
    std::string path = a.data;
    if (path.empty() && w.run) path = w.run->data.val;
    if (path.empty()) throw ConfigError("--task val: give --data (no run config.toml beside " + w.source + ")");
    const int B = a.micro_batch > 0 ? a.micro_batch : w.run ? w.run->training.micro_batch_size : 4;
    const int T = a.seq_len > 0 ? a.seq_len : w.model.seq_len;
    LoaderOptions lo;
    lo.path = path;
    lo.B = B;
    lo.T = T;
    lo.shuffle = false;
    lo.vocab_size = w.model.vocab_size;
    if (w.run) lo.seed = w.run->run.seed;
    // The model's tokenizer: the training data's, when the run config names a readable one (read
    // here, before the loader's I/O thread starts: HDF5 may not be thread-safe).
    if (w.run && std::filesystem::exists(w.run->data.train))
        lo.expect_tokenizer_sha256 = TokenDataset(w.run->data.train).info().tokenizer_sha256;
    DataLoader val(lo);  // DataError naming the file on another tokenizer
    EvalGpt m(a, w, B, T);
    const uint64_t all = val.batches_per_epoch();
    const uint64_t n = a.n > 0 ? std::min<uint64_t>(all, uint64_t(a.n)) : all;
    std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
    const auto t0 = std::chrono::steady_clock::now();
    double sum = 0;
    for (uint64_t i = 0; i < n; ++i) {
        val.next(in.data(), tgt.data());
        sum += m.gpt->evaluate(in.data(), tgt.data());
    }
    const float loss = float(sum / double(n));  // the trainer's mean of micro-batch means, rounded alike
    const uint64_t windows = (val.info().n_tokens - 1) / uint64_t(T);
    std::printf("val: %s: %s micro-batches of %d x %d tokens (%s of %s windows; %.1f s)\n", path.c_str(),
                format_thousands(double(n)).c_str(), B, T, format_thousands(double(n * B)).c_str(),
                format_thousands(double(windows)).c_str(), seconds_since(t0));
    std::printf("val loss %.9g perplexity %.6g\n", loss, std::exp(double(loss)));
    return kExitOk;
}

int task_hellaswag(const Args& a, const EvalWeights& w) {
    const bool ours = a.items.empty();
    const std::string file = ours ? hellaswag_default_path() : a.items;
    const std::vector<HellaSwagItem> items =
        read_hellaswag(file, ours ? kHellaSwagValSha256 : "", size_t(std::max(0LL, a.n)));
    const EvalTokenizer et = resolve_eval_tokenizer(w, a.tokenizer, a.data);
    std::printf("tokenizer: %s; %s\n", et.source.c_str(), et.note.c_str());
    const int max_len = a.seq_len > 0 ? std::min(a.seq_len, w.model.seq_len) : w.model.seq_len;
    std::vector<HellaSwagRows> rows;
    rows.reserve(items.size());
    int T = 1;
    for (size_t i = 0; i < items.size(); ++i) {
        rows.push_back(encode_hellaswag(items[i], et.tok, max_len, i, file));
        for (const auto& r : rows.back().tokens) T = std::max(T, int(r.size()));
    }
    if (a.seq_len > 0) T = a.seq_len;  // as given (the trainer's T): the same arithmetic as in the loop
    const int B = a.micro_batch > 0 ? a.micro_batch : 16;
    EvalGpt m(a, w, B, T);
    const auto t0 = std::chrono::steady_clock::now();
    GPT& gpt = *m.gpt;
    const std::vector<HellaSwagChoice> ch =
        score_hellaswag(rows, B, T, 0, [&](const int32_t* in, const int32_t* tgt, float* losses) {
            gpt.evaluate(in, tgt);
            m.ops->memcpy_d2h(losses, gpt.losses(0), size_t(B) * T * sizeof(float));
            m.ops->synchronize();
            return true;
        });
    const double secs = seconds_since(t0);
    const HellaSwagCounts c = count_hellaswag(ch);
    if (!a.per_item.empty()) {
        std::ofstream f(a.per_item, std::ios::trunc);
        f << "item\tlabel\tpred\tpred_norm\tsum0\tsum1\tsum2\tsum3\tn0\tn1\tn2\tn3\n";
        char buf[64];
        for (size_t i = 0; i < ch.size(); ++i) {
            f << i << '\t' << ch[i].label << '\t' << ch[i].pred << '\t' << ch[i].pred_norm;
            for (double s : ch[i].sum) f << '\t' << (std::snprintf(buf, sizeof buf, "%.9g", s), buf);
            for (int k : ch[i].n_tokens) f << '\t' << k;
            f << '\n';
        }
        if (!f.flush()) throw std::runtime_error("--per-item " + a.per_item + ": cannot write");
    }
    std::printf("hellaswag: %s items of %s, micro-batches of %d rows x %d tokens, %.1f s (%.1f items/s)\n",
                format_thousands(c.items).c_str(), file.c_str(), B, T, secs, c.items / std::max(secs, 1e-9));
    std::printf("hellaswag acc %.4f acc_norm %.4f (%s items)\n", c.acc(), c.acc_norm(),
                format_thousands(c.items).c_str());
    return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    CLI::App app{"llmtrain-eval: score a checkpoint or GPT-2 weights on the val loss of a token dataset or on "
                 "HellaSwag", "llmtrain-eval"};
    app.add_option("MODEL", a.model, "checkpoint directory, run directory, llm.c model file or HuggingFace GPT-2 / Llama")
        ->required();
    app.add_option("--task", a.task, "val | hellaswag")->required()->check(CLI::IsMember({"val", "hellaswag"}));
    app.add_option("--data", a.data, "token dataset (.h5): val's windows; hellaswag: its tokenizer");
    app.add_option("--tokenizer", a.tokenizer, "hellaswag: a token dataset, SentencePiece .model or GPT-2 tiktoken ranks");
    app.add_option("--items", a.items, "hellaswag: items in the six-line format (plain or gzip); default: the "
                                       "project's copy of the validation split");
    app.add_option("--n", a.n, "hellaswag: the first N items; val: the first N micro-batches (0: all)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--micro-batch", a.micro_batch, "rows per forward (val: the run's micro_batch_size; hellaswag: 16)")
        ->check(CLI::PositiveNumber);
    app.add_option("--seq-len", a.seq_len, "positions per row (val: the model's seq_len; hellaswag: the longest row)")
        ->check(CLI::PositiveNumber);
    app.add_option("--per-item", a.per_item, "hellaswag: write each item's choices and summed losses (TSV)");
    app.add_option("--backend", a.backend, "cpu | cuda (default cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--precision", a.precision, "fp32 | bf16 (cuda only; default fp32)")
        ->check(CLI::IsMember({"fp32", "bf16"}));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? kExitOk : kExitUsage;
    }
    try {
        const EvalWeights w = load_eval_weights(a.model);
        if (a.seq_len > w.model.seq_len)
            throw ConfigError("--seq-len " + std::to_string(a.seq_len) + ": longer than the model's seq_len " +
                              std::to_string(w.model.seq_len));
        std::printf("llmtrain-eval: %s: n_layer=%d n_head=%d n_embd=%d seq_len=%d vocab_size=%d, %s parameters; "
                    "backend %s, %s\n", w.source.c_str(), w.model.n_layer, w.model.n_head, w.model.n_embd,
                    w.model.seq_len, w.model.vocab_size,
                    format_thousands(double(ParamLayout(w.model).num_parameters())).c_str(), a.backend.c_str(),
                    a.precision.c_str());
        return a.task == "val" ? task_val(a, w) : task_hellaswag(a, w);
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "llmtrain-eval: error: %s\n", e.what());
        return kExitUsage;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llmtrain-eval: error: %s\n", e.what());
        return kExitFailure;
    }
}
