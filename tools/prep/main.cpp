// tools/prep/main.cpp — llmtrain-prep: raw text files -> tokenizer.model, train.h5, val.h5, or
// llm.c token shards -> train.h5 (+ val.h5).
//
//   llmtrain-prep [options] --out-dir DIR INPUT...   (INPUT: paths or quoted globs)
//   llmtrain-prep --from-llmc 'train_*.bin' [--llmc-val 'val_*.bin'] --out-dir DIR
//
// Three passes over the corpus, so memory does not grow with it: count the documents, train a
// SentencePiece BPE tokenizer on their lines (skipped with --tokenizer FILE.model or a tokenizer of
// the tiktoken family: gpt2, cl100k_base, o200k_base, tiktoken:PATH), then encode each document on
// every core (blocks of documents, results kept in corpus order), append EOS (and prepend BOS with --add-bos)
// and write it to train.h5 or val.h5. The validation split is a seeded random
// subset of whole documents. Outputs are written into a staging directory inside DIR and renamed
// into place only after all succeeded: a failed run leaves DIR's previous files as they were.
// Exit codes: 0 success, 2 bad input (usage, missing/unreadable input or tokenizer, no documents,
// vocab too small, unwritable DIR), 1 anything else.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "app/config/cli_positive.hpp"
#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"
#include "data/tokenizer_trainer.hpp"
#include "data/window_order.hpp"
#include "tools/prep/corpus.hpp"
#include "tools/prep/llmc.hpp"
#include "tools/prep/tokenizer_choice.hpp"

namespace fs = std::filesystem;
using namespace llmtrain;
using llmtrain::prep::DocumentReader;
using llmtrain::prep::LlmcStats;
using llmtrain::prep::PrepError;

namespace {

struct Args {
    std::vector<std::string> inputs;
    std::string separator;
    int vocab_size = 8192;
    double character_coverage = 0.9995;
    uint64_t input_sentence_size = 1000000;
    int num_threads = std::max(1u, std::thread::hardware_concurrency());
    std::string tokenizer;
    std::string gpt2_ranks = "data/gpt2/gpt2.tiktoken";
    std::string tiktoken_dir = "data/tiktoken";
    SpecialTokenOptions special;
    std::vector<std::string> llmc_train, llmc_val;
    bool add_bos = false;  ///< --add-bos: each document starts with the tokenizer's bos id
    double val_fraction = 0.05;
    uint64_t seed = 1337;
    std::string out_dir;
};

// The staging directory DIR/.llmtrain-prep.<pid>; removed with everything in it unless committed.
struct Staging {
    fs::path dir;
    explicit Staging(const fs::path& out_dir) {
        std::error_code ec;
        fs::create_directories(out_dir, ec);
        if (ec || !fs::is_directory(out_dir))
            throw PrepError("output directory " + out_dir.string() + ": cannot create it (" + ec.message() + ")");
        dir = out_dir / (".llmtrain-prep." + std::to_string(::getpid()));
        if (!fs::create_directory(dir, ec) || ec)
            throw PrepError("output directory " + out_dir.string() + " is not writable (" +
                            (ec ? ec.message() : std::string("staging directory exists")) + ")");
    }
    ~Staging() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

void write_file(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) throw std::runtime_error("cannot write " + path.string());
}

// Documents read but not yet encoded, with where each came from (for error messages).
struct Block {
    std::vector<std::string> docs;
    std::vector<std::string> files;
    uint64_t first_index = 0;  // corpus index of docs[0]
    size_t bytes = 0;
};

// Encodes block.docs[i] for all i with `threads` threads taking documents in turn from a shared
// counter; ids[i] belongs to docs[i], so the output order is the corpus order whatever the timing.
// Errors: DataError naming the document, its file and the tokenizer's reason (invalid UTF-8).
std::vector<std::vector<int32_t>> encode_all(const Tokenizer& tok, const Block& block, int threads) {
    const size_t n = block.docs.size();
    std::vector<std::vector<int32_t>> ids(n);
    std::vector<std::exception_ptr> errors(threads);
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            try {
                for (size_t i; (i = next.fetch_add(1)) < n;) {
                    try {
                        ids[i] = tok.encode(block.docs[i]);
                    } catch (const DataError& e) {
                        throw DataError("input " + block.files[i] + ": document " +
                                        std::to_string(block.first_index + i) + " (counted from 0 over all inputs): " +
                                        e.what());
                    }
                }
            } catch (...) {
                errors[t] = std::current_exception();
            }
        });
    for (auto& th : pool) th.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    return ids;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// H = -sum_i p_i log2 p_i over the empirical token distribution, in bits per token.
double unigram_entropy_bits(const std::vector<uint64_t>& counts) {
    uint64_t total = 0;
    for (uint64_t c : counts) total += c;
    double h = 0;
    for (uint64_t c : counts)
        if (c) {
            double p = static_cast<double>(c) / static_cast<double>(total);
            h -= p * std::log2(p);
        }
    return h;
}

// One llm.c shard set -> one dataset; returns its token and document counts, counting train tokens.
LlmcStats convert_llmc(const std::vector<std::string>& patterns, const fs::path& out, const Tokenizer& tok,
                       std::vector<uint64_t>* counts) {
    const std::vector<std::string> files = prep::expand_inputs(patterns);
    TokenDatasetWriter w(out.string(), tok.vocab_size(), tok.eos_id(), -1, tok.model_bytes(), tok.kind());
    LlmcStats st = prep::read_llmc_shards(files, tok.eos_id(), tok.vocab_size(),
                                          [&](const int32_t* t, size_t n, bool ends_doc) {
                                              w.append(t, n);
                                              if (counts)
                                                  for (size_t i = 0; i < n; ++i) ++(*counts)[t[i]];
                                              if (ends_doc) w.end_document();
                                          });
    if (st.tokens == 0) throw PrepError("llm.c shards '" + patterns.front() + "' hold no tokens");
    w.finish();
    std::printf("llm.c: %zu shard(s) -> %s: %llu tokens, %llu documents\n", files.size(), out.filename().c_str(),
                (unsigned long long)st.tokens, (unsigned long long)st.documents);
    return st;
}

// --from-llmc: llm.c's GPT-2 token shards -> train.h5 (+ val.h5 from --llmc-val), tokens unchanged.
int run_llmc(const Args& a) {
    if (!a.inputs.empty()) throw PrepError("--from-llmc takes no text inputs (got '" + a.inputs.front() + "')");
    if (!a.tokenizer.empty() && a.tokenizer != Tokenizer::kGpt2)
        throw PrepError("--from-llmc: llm.c shards hold GPT-2 tokens; --tokenizer must be gpt2 or absent");
    const Tokenizer tok = Tokenizer::gpt2_from_file(a.gpt2_ranks);
    const fs::path out_dir(a.out_dir);
    Staging staging(out_dir);
    std::vector<uint64_t> counts(tok.vocab_size(), 0);
    const auto t0 = std::chrono::steady_clock::now();
    LlmcStats st = convert_llmc(a.llmc_train, staging.dir / "train.h5", tok, &counts);
    if (!a.llmc_val.empty()) st.tokens += convert_llmc(a.llmc_val, staging.dir / "val.h5", tok, nullptr).tokens;
    fs::rename(staging.dir / "train.h5", out_dir / "train.h5");
    if (!a.llmc_val.empty())
        fs::rename(staging.dir / "val.h5", out_dir / "val.h5");
    else if (fs::exists(out_dir / "val.h5"))
        fs::remove(out_dir / "val.h5");
    if (fs::exists(out_dir / "tokenizer.model")) fs::remove(out_dir / "tokenizer.model");
    const double bits = unigram_entropy_bits(counts);
    std::printf("converted %llu tokens in %.2f s; unigram entropy of train tokens: %.4f bits/token = %.4f nats/token\n",
                (unsigned long long)st.tokens, seconds_since(t0), bits, bits * std::log(2.0));
    return 0;
}

int run(const Args& a) {
    if (!a.llmc_train.empty()) return run_llmc(a);
    if (!a.llmc_val.empty()) throw PrepError("--llmc-val needs --from-llmc");
    if (a.inputs.empty()) throw PrepError("no INPUT given (text files or globs), and no --from-llmc");
    if (!(a.val_fraction >= 0 && a.val_fraction < 1))
        throw PrepError("--val-fraction must be in [0, 1), got " + std::to_string(a.val_fraction));
    const std::vector<std::string> files = prep::expand_inputs(a.inputs);

    uint64_t n_docs = 0;
    std::string doc;
    DocumentReader counter(files, a.separator);
    while (counter.next(doc)) ++n_docs;
    if (n_docs == 0)
        throw PrepError("no documents: " + std::to_string(files.size()) + " input file(s) hold only blank text");
    uint64_t n_val = 0;
    if (a.val_fraction > 0) {
        if (n_docs < 2) throw PrepError("--val-fraction > 0 needs at least 2 documents, found 1");
        n_val = std::clamp<uint64_t>(std::llround(a.val_fraction * n_docs), 1, n_docs - 1);
    }
    const fs::path out_dir(a.out_dir);
    Staging staging(out_dir);

    std::optional<Tokenizer> tok;
    TokenizerTrainStats train_stats;
    std::string tok_summary;
    // The tiktoken family's datasets carry the ranks themselves: no tokenizer.model is written.
    const bool tiktoken = prep::is_tiktoken_family(a.tokenizer);
    if (!a.tokenizer.empty()) {
        tok.emplace(prep::load_tokenizer({a.tokenizer, a.gpt2_ranks, a.tiktoken_dir, a.special}, tok_summary));
    } else {
        DocumentReader reader(files, a.separator);
        std::deque<std::string> lines;
        LineSource next_line = [&](std::string& line) {
            while (lines.empty()) {
                if (!reader.next(doc)) return false;
                size_t pos = 0;
                for (size_t nl; (nl = doc.find('\n', pos)) != std::string::npos; pos = nl + 1)
                    lines.push_back(doc.substr(pos, nl - pos));
                lines.push_back(doc.substr(pos));
            }
            line = std::move(lines.front());
            lines.pop_front();
            return true;
        };
        TokenizerTrainOptions topt;
        topt.vocab_size = a.vocab_size;
        topt.character_coverage = a.character_coverage;
        topt.input_sentence_size = a.input_sentence_size;
        topt.num_threads = a.num_threads;
        topt.seed = a.seed;
        tok.emplace(Tokenizer::from_bytes(train_bpe_tokenizer(topt, next_line, &train_stats), "trained tokenizer"));
    }
    const int vocab = tok->vocab_size(), eos = tok->eos_id();
    if (eos < 0) throw PrepError("tokenizer " + a.tokenizer + " defines no EOS piece (eos_id = -1)");
    if (a.add_bos && tok->bos_id() < 0)
        throw PrepError("--add-bos: tokenizer " + (a.tokenizer.empty() ? std::string("(trained)") : a.tokenizer) +
                        " defines no BOS token (bos_id = -1; for tiktoken:PATH name one with --bos)");

    // Validation documents: the first n_val entries of a seeded permutation of document indices
    // (8 bytes per document while it is drawn, then 1 bit per document).
    std::vector<bool> is_val(n_docs, false);
    {
        const std::vector<uint64_t> perm = window_permutation(n_docs, a.seed, 0);
        for (uint64_t i = 0; i < n_val; ++i) is_val[perm[i]] = true;
    }

    const std::string kind = tok->kind();
    TokenDatasetWriter train((staging.dir / "train.h5").string(), vocab, eos, tok->bos_id(), tok->model_bytes(), kind);
    std::optional<TokenDatasetWriter> val;
    if (n_val > 0)
        val.emplace((staging.dir / "val.h5").string(), vocab, eos, tok->bos_id(), tok->model_bytes(), kind);
    std::vector<uint64_t> counts(vocab, 0);
    uint64_t train_tokens = 0, val_tokens = 0, index = 0;
    DocumentReader reader(files, a.separator);
    // A block is read, then encoded by all threads: at most 256 documents or 32 MiB of text (plus
    // one document) are in memory, whatever the corpus size.
    const size_t kBlockDocs = 256, kBlockBytes = 32u << 20;
    double encode_s = 0;
    const auto t_start = std::chrono::steady_clock::now();
    Block block;
    bool more = true;
    while (more) {
        block.docs.clear();
        block.files.clear();
        block.first_index = index;
        block.bytes = 0;
        while (block.docs.size() < kBlockDocs && block.bytes < kBlockBytes && (more = reader.next(doc))) {
            block.bytes += doc.size();
            block.docs.push_back(std::move(doc));
            block.files.push_back(reader.document_file());
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto encoded = encode_all(*tok, block, a.num_threads);
        encode_s += seconds_since(t0);
        for (auto& ids : encoded) {
            if (index == n_docs) throw std::runtime_error("the input files changed while llmtrain-prep read them");
            if (a.add_bos) ids.insert(ids.begin(), tok->bos_id());  // Llama 3's <|begin_of_text|> doc ... <|end_of_text|>
            ids.push_back(eos);
            if (is_val[index++]) {
                val->add_document(ids);
                val_tokens += ids.size();
            } else {
                train.add_document(ids);
                train_tokens += ids.size();
                for (int32_t t : ids) ++counts[t];
            }
        }
    }
    if (index != n_docs) throw std::runtime_error("the input files changed while llmtrain-prep read them");
    train.finish();
    if (val) val->finish();
    const double total_s = seconds_since(t_start);
    if (!tiktoken) write_file(staging.dir / "tokenizer.model", tok->model_bytes());

    // Commit: every output is complete, so rename them over the previous ones.
    fs::rename(staging.dir / "train.h5", out_dir / "train.h5");
    if (val) {
        fs::rename(staging.dir / "val.h5", out_dir / "val.h5");
    } else if (fs::exists(out_dir / "val.h5")) {
        fs::remove(out_dir / "val.h5");  // a stale split of another tokenizer or corpus
    }
    if (!tiktoken)
        fs::rename(staging.dir / "tokenizer.model", out_dir / "tokenizer.model");
    else if (fs::exists(out_dir / "tokenizer.model"))
        fs::remove(out_dir / "tokenizer.model");  // a stale SentencePiece model: the datasets hold the ranks

    const double bits = unigram_entropy_bits(counts);
    std::printf("llmtrain-prep: %llu documents from %zu file(s) (%llu blank skipped): %llu train, %llu val\n",
                (unsigned long long)n_docs, files.size(), (unsigned long long)reader.skipped_blank(),
                (unsigned long long)(n_docs - n_val), (unsigned long long)n_val);
    if (a.tokenizer.empty())
        std::printf("tokenizer: trained BPE, vocab_size %d, byte_fallback, %llu sentences (%llu long lines split)\n",
                    vocab, (unsigned long long)train_stats.sentences, (unsigned long long)train_stats.split_lines);
    else
        std::printf("tokenizer: %s\n", tok_summary.c_str());
    std::printf("tokens: train %llu, val %llu (EOS id %d after each document)\n", (unsigned long long)train_tokens,
                (unsigned long long)val_tokens, eos);
    std::printf("encoding: %.2f s on %d threads, %.0f tokens/s (%.0f tokens/s with reading and writing)\n", encode_s,
                a.num_threads, (train_tokens + val_tokens) / std::max(encode_s, 1e-9),
                (train_tokens + val_tokens) / std::max(total_s, 1e-9));
    std::printf("unigram entropy of train tokens: %.4f bits/token = %.4f nats/token (the loss of a model that ignores context)\n",
                bits, bits * std::log(2.0));
    std::string wrote = tiktoken ? "" : (out_dir / "tokenizer.model").string() + ", ";
    wrote += (out_dir / "train.h5").string() + (val ? ", " + (out_dir / "val.h5").string() : "");
    std::printf("wrote %s\n", wrote.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    CLI::App app{"llmtrain-prep: raw text -> SentencePiece BPE or GPT-2 tokens, or llm.c shards -> train/val HDF5 "
                 "token datasets",
                 "llmtrain-prep"};
    app.add_option("inputs", a.inputs, "text files or quoted globs ('data/*.txt')");
    app.add_option("--out-dir", a.out_dir, "writes tokenizer.model, train.h5, val.h5 here")->required();
    app.add_option("--separator", a.separator,
                   "a line equal to this ends a document (default: one document per file)");
    app.add_option("--vocab-size", a.vocab_size, "BPE vocabulary size (>= 260)")->capture_default_str();
    app.add_option("--character-coverage", a.character_coverage,
                   "fraction of characters given their own piece; rarer ones fall back to bytes")
        ->capture_default_str();
    app.add_option("--input-sentence-size", a.input_sentence_size,
                   "lines sampled (shuffled) for tokenizer training; 0 = all")
        ->capture_default_str();
    app.add_option("--num-threads", a.num_threads, "threads for training and encoding")
        ->check(kPositive)
        ->capture_default_str();
    app.add_option("--tokenizer", a.tokenizer,
                   "'gpt2' (GPT-2's BPE, ranks from --gpt2-ranks), 'cl100k_base' or 'o200k_base' (ranks from "
                   "--tiktoken-dir), 'tiktoken:PATH' (a tiktoken ranks file such as Llama 3's tokenizer.model, "
                   "cl100k's split pattern), or an existing SentencePiece .model to use instead of training one");
    app.add_option("--gpt2-ranks", a.gpt2_ranks, "GPT-2's ranks file (tools/fetch_gpt2.sh data/gpt2 writes it)")
        ->capture_default_str();
    app.add_option("--tiktoken-dir", a.tiktoken_dir,
                   "holds cl100k_base.tiktoken and o200k_base.tiktoken (tools/fetch_tiktoken.sh data/tiktoken)")
        ->capture_default_str();
    app.add_flag("--add-bos", a.add_bos,
                 "start every document with the tokenizer's bos token (Llama 3's <|begin_of_text|>; SentencePiece's "
                 "<s>); the eos token ends it either way");
    app.add_option("--special", a.special.specials,
                   "tiktoken:PATH: a special token TEXT=ID (repeatable; e.g. '<|end_of_text|>=128001'); default: "
                   "tokenizer_config.json beside PATH, else Llama 3's 256 after the last rank")
        ->allow_extra_args(false);  // one TEXT=ID per --special: the inputs that follow stay inputs
    app.add_option("--special-tokens", a.special.file,
                   "tiktoken:PATH: read the special tokens (and eos/bos) from this HuggingFace tokenizer_config.json "
                   "or tokenizer.json");
    app.add_option("--eos", a.special.eos,
                   "tiktoken:PATH: the special token (text or id) appended after each document; default: the JSON's "
                   "eos_token, else <|end_of_text|>, else <|endoftext|>");
    app.add_option("--bos", a.special.bos,
                   "tiktoken:PATH: the begin-of-text special token recorded as bos_id (text, id or 'none'); default: "
                   "the JSON's bos_token, else <|begin_of_text|> if present");
    app.add_option("--from-llmc", a.llmc_train,
                   "convert llm.c token shards (files or quoted globs) into train.h5 instead of tokenizing text");
    app.add_option("--llmc-val", a.llmc_val, "with --from-llmc: llm.c shards for val.h5");
    app.add_option("--val-fraction", a.val_fraction, "fraction of documents held out for val.h5")
        ->capture_default_str();
    app.add_option("--seed", a.seed, "seed of the validation split and of tokenizer sampling")->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    try {
        return run(a);
    } catch (const PrepError& e) {
        std::fprintf(stderr, "llmtrain-prep: error: %s\n", e.what());
        return 2;
    } catch (const DataError& e) {
        std::fprintf(stderr, "llmtrain-prep: error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llmtrain-prep: failed: %s\n", e.what());
        return 1;
    }
}
