// tests/app/test_mixture_e2e.cpp — mixtures of sources and the WSD schedule through the llmtrain
// binary, on the tiny model and dataset of make_tiny_dataset (ctest fixture), split here by
// documents into three sources (one of them as a glob of two shards). References:
//  - tokens per source: the weights (within 1%), read from losses.tsv's tokens:<source> rows;
//  - per-source val losses: a val:<source> row for each source with `val`, at every evaluation;
//  - a glob of shards of train.h5: the losses of train.h5 itself, bit for bit;
//  - resume of a mixture: the losses of an unbroken run, bit for bit (expect_resume_is_exact);
//  - WSD resumed from a stable-phase checkpoint under a longer run: the losses and lrs of a run
//    planned that long from the start, bit for bit, and lrs equal to torchtitan's closed form.
#include <cmath>

#include "tests/app/e2e_util.hpp"

namespace {

// Writes the documents d of `src` with d % parts == part (or all when parts is 1 and the range
// [lo, hi) of documents) to `path`, with its tokenizer.
void write_docs(TokenDataset& src, const std::string& path, int part, int parts, uint64_t lo, uint64_t hi) {
    const DatasetInfo& info = src.info();
    const std::vector<uint64_t> off = src.doc_offsets();
    TokenDatasetWriter w(path, info.vocab_size, info.eos_id, info.bos_id, src.tokenizer_bytes(), info.tokenizer);
    for (uint64_t d = lo; d < std::min<uint64_t>(hi, off.size() - 1); ++d) {
        if (int(d % uint64_t(parts)) != part) continue;
        const int len = int(off[d + 1] - off[d]);
        std::vector<int32_t> doc(static_cast<size_t>(len));
        src.read_windows({off[d]}, len, doc.data(), info.vocab_size);
        w.add_document(doc);
    }
    w.finish();
}

// losses.tsv rows of `kind` as step -> value text.
std::map<int64_t, std::string> rows_of(const fs::path& rd, const std::string& kind) {
    std::ifstream f(rd / "losses.tsv");
    std::map<int64_t, std::string> out;
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string step, k, v;
        std::getline(ls, step, '\t');
        std::getline(ls, k, '\t');
        std::getline(ls, v, '\t');
        if (k == kind) out[std::stoll(step)] = v;
    }
    return out;
}

// The lr column of losses.tsv's train rows.
std::map<int64_t, std::string> lrs_of(const fs::path& rd) {
    std::ifstream f(rd / "losses.tsv");
    std::map<int64_t, std::string> out;
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string step, k, loss, lr;
        std::getline(ls, step, '\t');
        std::getline(ls, k, '\t');
        std::getline(ls, loss, '\t');
        std::getline(ls, lr, '\t');
        if (k == "train") out[std::stoll(step)] = lr;
    }
    return out;
}

// Three sources from train.h5's documents: web (a glob of two shards), code, math.
std::vector<std::string> mixture_sets(const fs::path& dir, double w_web, double w_code, double w_math) {
    fs::create_directories(dir);
    TokenDataset train(kData + "/train.h5");
    const uint64_t n_docs = train.info().n_docs;
    write_docs(train, (dir / "web_0.h5").string(), 0, 3, 0, n_docs / 2);
    write_docs(train, (dir / "web_1.h5").string(), 0, 3, n_docs / 2, n_docs);
    write_docs(train, (dir / "code.h5").string(), 1, 3, 0, n_docs);
    write_docs(train, (dir / "math.h5").string(), 2, 3, 0, n_docs);
    const std::string val = kData + "/val.h5";
    auto entry = [](const std::string& name, const fs::path& path, double w, const std::string& v) {
        std::ostringstream os;
        os << "{name = \"" << name << "\", path = \"" << path.string() << "\", weight = " << w << ", val = \"" << v
           << "\"}";
        return os.str();
    };
    return {"data.sources=[" + entry("web", dir / "web_*.h5", w_web, val) + ", " +
            entry("code", dir / "code.h5", w_code, val) + ", " + entry("math", dir / "math.h5", w_math, "") + "]"};
}

// llmtrain_args without data.train (a mixture may not name it).
std::vector<std::string> mixture_args(const fs::path& rd, const std::vector<std::string>& sets) {
    std::vector<std::string> a = llmtrain_args(rd, sets);
    for (size_t i = 0; i + 1 < a.size(); ++i)
        if (a[i] == "--set" && a[i + 1].rfind("data.train=", 0) == 0) {
            a.erase(a.begin() + long(i), a.begin() + long(i) + 2);
            break;
        }
    return a;
}

}  // namespace

TEST_F(E2E, MixtureTokensPerSourceMatchTheWeights) {
    const fs::path rd = case_dir() / "mix";
    std::vector<std::string> sets = mixture_sets(case_dir() / "data", 0.5, 0.3, 0.2);
    sets.insert(sets.end(), {"run.max_steps=40", "run.log_interval=10", "run.eval_interval=20", "run.sample_interval=0"});
    Proc p = run(mixture_args(rd, sets));
    ASSERT_EQ(p.code, 0) << p.err;
    const std::map<std::string, double> weight = {{"web", 0.5}, {"code", 0.3}, {"math", 0.2}};
    double total = 0;
    std::map<std::string, double> tokens;
    for (const auto& [name, w] : weight) {
        const auto rows = rows_of(rd, "tokens:" + name);
        ASSERT_TRUE(rows.count(40)) << name;
        tokens[name] = std::stod(rows.at(40));
        total += tokens[name];
    }
    EXPECT_EQ(total, 40.0 * 2 * 16);  // every token of the 40 steps of 2 sequences of 16
    for (const auto& [name, w] : weight) {
        EXPECT_NEAR(tokens[name] / total, w, 0.01) << name;
        std::printf("measured: %s %.0f tokens, %.4f of %.0f (weight %.2f)\n", name.c_str(), tokens[name],
                    tokens[name] / total, total, w);
    }
    EXPECT_NE(p.out.find("step 40/40 | tokens by source: web 640 (50.00%), code 384 (30.00%), math 256 (20.00%)"),
              std::string::npos) << p.out;
    // val losses: the whole val set, and each source with `val` (web and code) at both evaluations.
    EXPECT_EQ(rows_of(rd, "val:web").size(), 2u);
    EXPECT_EQ(rows_of(rd, "val:code").size(), 2u);
    EXPECT_TRUE(rows_of(rd, "val:math").empty());
    EXPECT_EQ(rows_of(rd, "val:web"), rows_of(rd, "val"));  // the same val file, the same loss
}

TEST_F(E2E, GlobOfShardsTrainsLikeTheFile) {
    const fs::path data = case_dir() / "data";
    fs::create_directories(data);
    {
        TokenDataset train(kData + "/train.h5");
        const uint64_t n = train.info().n_docs;
        write_docs(train, (data / "train_0.h5").string(), 0, 1, 0, n / 3);
        write_docs(train, (data / "train_1.h5").string(), 0, 1, n / 3, n);
    }
    const fs::path a = case_dir() / "file", b = case_dir() / "glob";
    Proc pa = run(llmtrain_args(a, {"run.max_steps=6"}));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb = run(llmtrain_args(b, {"run.max_steps=6", "data.train=\"" + (data / "train_*.h5").string() + "\""}));
    ASSERT_EQ(pb.code, 0) << pb.err;
    const auto la = train_losses(a);
    ASSERT_EQ(la.size(), 6u);
    EXPECT_EQ(la, train_losses(b));
}

TEST_F(E2E, MixtureResumeIsBitwiseExact) {
    std::vector<std::string> common = mixture_sets(case_dir() / "data", 0.6, 0.25, 0.15);
    common.insert(common.end(), {"lr_schedule.decay=\"constant\"", "training.grad_accum_steps=2"});
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.end(), common.begin(), common.end());
        return v;
    };
    const fs::path a = case_dir() / "straight", b = case_dir() / "resumed";
    Proc pa = run(mixture_args(a, with({"run.max_steps=8"})));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb1 = run(mixture_args(b, with({"run.max_steps=4"})));
    ASSERT_EQ(pb1.code, 0) << pb1.err;
    const std::string state = read_file(b / "checkpoints" / "step_4" / "state.toml");
    EXPECT_NE(state.find("[[loader.sources]]"), std::string::npos) << state;
    Proc pb2 = run(mixture_args(b, with({"run.max_steps=8"})));
    ASSERT_EQ(pb2.code, 0) << pb2.err;
    expect_resume_is_exact(a, b, pa.out, pb2.out);
    EXPECT_EQ(rows_of(a, "tokens:web").at(8), rows_of(b, "tokens:web").at(8));
}

// Planned for 8 steps with the last quarter decaying (steps 7, 8), checkpointed at step 4 in the
// stable phase, resumed with max_steps 12 (decay over steps 10-12): steps 5-12 equal a run planned
// for 12 steps from the start, and every lr is the closed form.
TEST_F(E2E, WsdDecayStartsFromAStablePhaseCheckpoint) {
    const std::vector<std::string> wsd = {"lr_schedule.decay=\"wsd\"", "lr_schedule.decay_ratio=0.25",
                                          "lr_schedule.decay_type=\"sqrt\"", "run.sample_interval=0",
                                          "run.eval_interval=0"};
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.end(), wsd.begin(), wsd.end());
        return v;
    };
    const fs::path planned = case_dir() / "planned8", longer = case_dir() / "longer12", straight = case_dir() / "straight12";
    Proc p8 = run(llmtrain_args(planned, with({"run.max_steps=8", "checkpoint.interval=4", "checkpoint.keep_last=0"})));
    ASSERT_EQ(p8.code, 0) << p8.err;
    const std::string ck4 = (planned / "checkpoints" / "step_4").string();
    Proc p12 = run(llmtrain_args(longer, with({"run.max_steps=12", "checkpoint.resume=\"" + ck4 + "\""})));
    ASSERT_EQ(p12.code, 0) << p12.err;
    Proc ps = run(llmtrain_args(straight, with({"run.max_steps=12"})));
    ASSERT_EQ(ps.code, 0) << ps.err;
    const auto lr8 = lrs_of(planned), lr12 = lrs_of(longer), lrs = lrs_of(straight);
    const auto l12 = train_losses(longer), ls = train_losses(straight);
    for (int s = 5; s <= 12; ++s) {
        EXPECT_EQ(lr12.at(s), lrs.at(s)) << s;
        EXPECT_EQ(l12.at(s), ls.at(s)) << s;
    }
    for (int s = 1; s <= 4; ++s) EXPECT_EQ(lr8.at(s), lrs.at(s)) << s;  // warmup and stable: the same plan
    // torchtitan's form: step s (1-based) runs at lr(s - 1): warmup 2, decay D = round(0.25 N) from N - D.
    auto closed = [](int s, int n) {
        const double lr = 0.01, min_lr = 0.001;
        const int step = s - 1, d = int(std::lround(0.25 * n));
        if (step < 2) return lr * (step + 1) / 2;
        if (step < n - d) return lr;
        return min_lr + (lr - min_lr) * (1 - std::sqrt(std::min(1.0, double(step + 1 - (n - d)) / d)));
    };
    for (int s = 1; s <= 12; ++s) EXPECT_NEAR(std::stod(lrs.at(s)), closed(s, 12), 1e-9) << s;
    for (int s = 1; s <= 8; ++s) EXPECT_NEAR(std::stod(lr8.at(s)), closed(s, 8), 1e-9) << s;
    EXPECT_NE(lr8.at(7), lrs.at(7));  // the 8-step plan decays at step 7, the 12-step one does not yet
}

int main(int argc, char** argv) { return e2e_main(argc, argv); }
