// tests/model/test_documents_torch.cpp — document masking (GPTOptions::doc_mask with doc_positions,
// config data.document_mask + data.reset_position_ids) on the CPU backend against its definition:
// tests/model/documents_ref.py runs each document of the packed window alone, from position 0,
// through the independent float64 GPT-2 and Llama of torch_ref.py and llama_ref.py, and the packed
// masked run must give the same logits, loss and parameter gradients (tolerances of
// test_llama_torch.cpp: fp32 against float64). Also: the same window without the mask differs (so
// the comparison can fail), and one document per row (no EOS) is bitwise the unmasked model.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "tests/model/tensor_file.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

constexpr int kB = 2, kT = 17, kN = kB * kT, kEos = 7;

std::vector<float> host_copy(Ops& ops, const void* p, size_t n) {
    std::vector<float> v(n);
    ops.memcpy_d2h(v.data(), p, n * 4);
    ops.synchronize();
    return v;
}

std::vector<float> slice(const std::vector<float>& flat, const ParamTensor& t) {
    return {flat.begin() + t.offset, flat.begin() + t.offset + t.numel};
}

GPTConfig tiny(Arch arch) {
    GPTConfig c{2, 4, 48, kT, 101};  // head size 12, Vp = 128
    c.arch = arch;
    if (arch == Arch::llama) {
        c.n_kv_head = 2;
        c.multiple_of = 24;
        c.tie_embeddings = false;
    }
    return c;
}

/// Row 0: documents of 5, 1, 6 and 5 tokens (EOS at 4, 5, 11); row 1: EOS at 2 and at its end.
void make_batch(std::vector<int>& tokens, std::vector<int>& targets, uint64_t seed, bool with_eos) {
    std::mt19937_64 rng(seed);
    tokens.assign(kN, 0);
    targets.assign(kN, 0);
    for (int i = 0; i < kN; ++i) {
        do tokens[size_t(i)] = static_cast<int>(rng() % 101);
        while (tokens[size_t(i)] == kEos);
        targets[size_t(i)] = static_cast<int>(rng() % 101);
    }
    if (with_eos)
        for (int i : {4, 5, 11, kT + 2, kT + kT - 1}) tokens[size_t(i)] = kEos;
}

struct RunResult {
    std::vector<float> logits, grads;
    double loss = 0;
};

/// forward_backward and the logits of a GPT with or without document masking on `params`.
RunResult run_gpt(Ops& ops, const GPTConfig& cfg, bool docs, const std::vector<float>* params, const std::vector<int>& tok,
            const std::vector<int>& tgt, std::vector<float>* init = nullptr) {
    Allocator alloc(ops);
    GPTOptions o;
    o.B = kB;
    o.T = kT;
    if (docs) {
        o.doc_eos = kEos;
        o.doc_mask = o.doc_positions = true;
    }
    GPT gpt(cfg, o, alloc);
    const ParamLayout& L = gpt.layout();
    if (params != nullptr) {
        gpt.store().load_params(params->data());
    } else {  // larger weights than the init's 0.02, as test_llama_torch.cpp: far from linear
        gpt.init_params(99);
        auto p = host_copy(ops, gpt.params(), L.total_numel());
        for (const ParamTensor& t : L.tensors())
            for (size_t i = 0; i < t.numel; ++i)
                p[t.offset + i] = t.shape.size() == 1 ? 1.0f + 0.5f * std::sin(float(i)) : p[t.offset + i] * 15.0f;
        gpt.store().load_params(p.data());
        *init = p;
    }
    RunResult r;
    gpt.zero_grads();
    gpt.forward_backward(tok.data(), tgt.data(), 1.0f / kN);
    r.loss = gpt.take_loss_sum();
    r.grads = host_copy(ops, gpt.grads(), L.total_numel());
    gpt.logits_at(tok.data(), 0);  // a forward without targets: the logits stay in place
    r.logits = host_copy(ops, gpt.logits(), size_t(kN) * cfg.padded_vocab_size());
    return r;
}

void check_against_torch(Arch arch) {
    const GPTConfig cfg = tiny(arch);
    auto ops = make_backend("cpu", "fp32");
    std::vector<int> tok, tgt;
    make_batch(tok, tgt, 5, true);
    std::vector<float> params;
    const RunResult got = run_gpt(*ops, cfg, true, nullptr, tok, tgt, &params);

    Allocator alloc(*ops);
    GPTOptions o;
    o.B = kB;
    o.T = kT;
    GPT layout_only(cfg, o, alloc);
    const ParamLayout& L = layout_only.layout();
    char dir_tmpl[] = "/tmp/llmtrain_documents_ref_XXXXXX";
    ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
    const std::string dir = dir_tmpl, in_path = dir + "/in.bin", out_path = dir + "/out.bin";
    {
        TensorWriter w(in_path);
        const int c[9] = {arch == Arch::llama ? 1 : 0, cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.n_embd,
                          cfg.vocab_size, kEos, kB, kT};
        const float hyper[2] = {cfg.norm_eps, cfg.rope_theta};
        w.put("config", {9}, c);
        w.put("hyper", {2}, hyper);
        w.put("tokens", {kB, kT}, tok.data());
        w.put("targets", {kB, kT}, tgt.data());
        for (const ParamTensor& t : L.tensors()) w.put("param." + t.name, t.shape, params.data() + t.offset);
    }
    const std::string cmd = std::string(LLMTRAIN_PYTHON) + " " + DOCUMENTS_REF_SCRIPT + " " + in_path + " " + out_path;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "failed: " << cmd;
    auto ref = read_tensors(out_path);
    std::filesystem::remove_all(dir);

    const double want_loss = ref["loss"].data[0];
    EXPECT_LE(std::fabs(got.loss - want_loss), 1e-5 * std::fabs(want_loss)) << "loss " << got.loss << " want "
                                                                           << want_loss;
    const auto& want_logits = ref["logits"].data;
    expect_close("logits", got.logits, want_logits, 0.0, 1e-5 * max_abs(want_logits));
    for (const ParamTensor& t : L.tensors()) {
        const auto& want = ref["grad." + t.name].data;
        ASSERT_EQ(want.size(), t.numel) << t.name;
        expect_close("grad " + t.name, slice(got.grads, t), want, 1e-4, 1e-4 * max_abs(want));
    }
    // Without the mask the same window gives another loss: the comparison above can fail.
    const RunResult plain = run_gpt(*ops, cfg, false, &params, tok, tgt);
    EXPECT_GT(std::fabs(plain.loss - want_loss), 1e-3 * std::fabs(want_loss));
}

TEST(DocumentsVsTorch, Gpt2PackedWindowIsItsDocumentsOneByOne) { check_against_torch(Arch::gpt2); }

TEST(DocumentsVsTorch, LlamaPackedWindowIsItsDocumentsOneByOne) { check_against_torch(Arch::llama); }

TEST(DocumentsVsTorch, NoEosIsBitwiseTheUnmaskedModel) {
    for (Arch arch : {Arch::gpt2, Arch::llama}) {
        const GPTConfig cfg = tiny(arch);
        auto ops = make_backend("cpu", "fp32");
        std::vector<int> tok, tgt;
        make_batch(tok, tgt, 6, false);
        std::vector<float> params;
        const RunResult a = run_gpt(*ops, cfg, true, nullptr, tok, tgt, &params);
        const RunResult b = run_gpt(*ops, cfg, false, &params, tok, tgt);
        EXPECT_EQ(a.loss, b.loss);
        ASSERT_EQ(a.grads, b.grads);
        ASSERT_EQ(a.logits, b.logits);
    }
}

}  // namespace
}  // namespace llmtrain::test
