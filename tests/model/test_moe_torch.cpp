// tests/model/test_moe_torch.cpp — the MoE layer of model/moe.hpp (fp32, run as moe_layer_run.hpp
// runs it) against an independent float64 PyTorch layer (moe_ref.py, written from the Mixtral,
// Qwen3-MoE, Switch and DeepSeek-V3 descriptions with HuggingFace's expert loop and autograd):
// the selected experts exactly, the output, the balance loss, the total loss and the gradients of
// x, the router and every expert weight. Cases: Mixtral (softmax, k 2, renormalized), Qwen3-MoE
// with norm_topk_prob off (raw top-k probabilities), Switch (k 1), DeepSeek-V3 (sigmoid, a
// selection bias, scale 2.5), one with an expert that gets no tokens.
#include <stdlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string>

#include "tests/model/moe_layer_run.hpp"
#include "tests/model/tensor_file.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

struct Case {
    const char* name;
    Cfg cfg;
    bool zero_last;
};

Cfg base(int k, MoeScore score, bool norm, float scale, bool bias) {
    Cfg c;
    c.N = 32;
    c.C = 16;
    c.E = 6;
    c.F = 24;
    c.k = k;
    c.opt.score = score;
    c.opt.norm_topk = norm;
    c.opt.route_scale = scale;
    c.bias = bias;
    return c;
}

/// w13 (E,2F,C) split into its gate (w1) or up (w3) halves, (E,F,C) each.
std::vector<float> half(const std::vector<float>& w13, const Cfg& c, int which) {
    std::vector<float> w;
    for (int e = 0; e < c.E; ++e) {
        const auto first = w13.begin() + (size_t(e) * 2 + which) * c.F * c.C;
        w.insert(w.end(), first, first + size_t(c.F) * c.C);
    }
    return w;
}

TEST(MoeTorch, LayerLossAndGradientsMatchFloat64PyTorch) {
    const Case cases[] = {
        {"mixtral", base(2, MoeScore::softmax, true, 1.0f, false), false},
        {"qwen3-raw", base(2, MoeScore::softmax, false, 1.0f, false), false},
        {"switch-k1", base(1, MoeScore::softmax, true, 1.0f, false), true},
        {"deepseek-v3", base(2, MoeScore::sigmoid, true, 2.5f, true), false},
        {"deepseek-v3-zero-expert", base(2, MoeScore::sigmoid, true, 2.5f, true), true},
    };
    char dir_tmpl[] = "/tmp/llmtrain_moe_ref_XXXXXX";
    ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
    const std::string dir = dir_tmpl;
    std::vector<Data> data;
    std::string cmd = std::string(LLMTRAIN_PYTHON) + " " + MOE_REF_SCRIPT;
    for (size_t i = 0; i < std::size(cases); ++i) {  // every case's input, then one python run
        const Cfg& c = cases[i].cfg;
        data.push_back(make_data(c, 101, cases[i].zero_last));
        const Data& d = data.back();
        const std::string in_path = dir + "/in" + std::to_string(i) + ".bin";
        cmd += " " + in_path + " " + dir + "/out" + std::to_string(i) + ".bin";
        TensorWriter w(in_path);
        const int cfg[8] = {c.N, c.C, c.E, c.k, c.F, c.opt.score == MoeScore::sigmoid, c.opt.norm_topk, c.bias};
        const float hyper[2] = {c.opt.route_scale, float(c.alpha)};
        w.put("config", {8}, cfg);
        w.put("hyper", {2}, hyper);
        w.put("x", {c.N, c.C}, d.x.data());
        w.put("w_router", {c.E, c.C}, d.wr.data());
        w.put("w1", {c.E, c.F, c.C}, half(d.w13, c, 0).data());
        w.put("w3", {c.E, c.F, c.C}, half(d.w13, c, 1).data());
        w.put("w2", {c.E, c.C, c.F}, d.w2.data());
        w.put("bias", {c.E}, d.bias.data());
        w.put("R", {c.N, c.C}, d.R.data());
    }
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "failed: " << cmd;
    for (size_t i = 0; i < std::size(cases); ++i) {
        const Case& cs = cases[i];
        SCOPED_TRACE(cs.name);
        const Cfg& c = cs.cfg;
        const Data& d = data[i];
        const LayerRun r = run_layer(c, d);
        auto ref = read_tensors(dir + "/out" + std::to_string(i) + ".bin");
        const auto& ids = ref["ids"].data;
        ASSERT_EQ(ids.size(), r.ids.size());
        for (size_t j = 0; j < ids.size(); ++j) ASSERT_EQ(r.ids[j], int(ids[j])) << "pair " << j;
        if (cs.zero_last) {
            EXPECT_EQ(r.counts[c.E - 1], 0);
        }
        expect_close("out", r.out, ref["out"].data, 1e-5, 1e-6);
        EXPECT_NEAR(r.aux, ref["aux"].data[0], 1e-6 * std::fabs(ref["aux"].data[0]));
        double loss = r.aux;
        for (size_t j = 0; j < r.out.size(); ++j) loss += double(r.out[j]) * d.R[j];
        EXPECT_NEAR(loss, ref["loss"].data[0], 1e-5 * std::fabs(ref["loss"].data[0]) + 1e-6);
        expect_close("grad.x", r.dx, ref["grad.x"].data, 1e-4, 1e-5);
        expect_close("grad.w_router", r.dwr, ref["grad.w_router"].data, 1e-4, 1e-5);
        expect_close("grad.w1", half(r.dw13, c, 0), ref["grad.w1"].data, 1e-4, 1e-5);
        expect_close("grad.w3", half(r.dw13, c, 1), ref["grad.w3"].data, 1e-4, 1e-5);
        expect_close("grad.w2", r.dw2, ref["grad.w2"].data, 1e-4, 1e-5);
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace llmtrain::test
