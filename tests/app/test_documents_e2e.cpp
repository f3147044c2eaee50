// tests/app/test_documents_e2e.cpp — document masking (data.document_mask, data.reset_position_ids;
// docs/attention.md "Document masking") through the llmtrain binary on the tiny model and dataset
// of make_tiny_dataset (ctest fixture), whose documents end with EOS as llmtrain-prep writes them:
//  - GPT-2 and Llama train with both keys on, the start-up log says so, and the losses differ from
//    the same run without them (the tiny windows of 16 tokens do cross documents);
//  - a masked run stopped and resumed is bit for bit the unbroken one (expect_resume_is_exact);
//  - both keys false are the default: bit for bit the run that does not name them.
// The model's arithmetic is checked elsewhere (tests/model/test_documents_torch.cpp); with pipeline
// stages and context parallelism against one process: tests/parallel/cp_equivalence.sh.
#include "tests/app/e2e_util.hpp"

namespace {

const std::vector<std::string> kDocs = {"data.document_mask=true", "data.reset_position_ids=true"};

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST_F(E2E, DocumentMaskTrainsAndDiffersFromThePlainRun) {
    for (const std::string arch : {"gpt2", "llama"}) {
        const std::vector<std::string> common = {"run.max_steps=6", "model.arch=\"" + arch + "\"",
                                                 "run.sample_interval=0"};
        const fs::path masked = case_dir() / (arch + "_masked"), plain = case_dir() / (arch + "_plain");
        Proc pm = run(llmtrain_args(masked, plus(common, kDocs)));
        ASSERT_EQ(pm.code, 0) << pm.err;
        EXPECT_NE(pm.out.find("documents: attention masked to each document, positions restart at each document"),
                  std::string::npos) << pm.out;
        Proc pp = run(llmtrain_args(plain, common));
        ASSERT_EQ(pp.code, 0) << pp.err;
        const auto lm = train_losses(masked), lp = train_losses(plain);
        ASSERT_EQ(lm.size(), 6u);
        ASSERT_EQ(lp.size(), 6u);
        EXPECT_EQ(lm.at(1).empty(), false);
        EXPECT_NE(lm, lp) << arch;
        for (const auto& [step, loss] : lm) EXPECT_TRUE(std::isfinite(std::stod(loss))) << step;
    }
}

TEST_F(E2E, DocumentMaskResumeIsBitwiseExact) {
    const std::vector<std::string> common = plus({"lr_schedule.decay=\"constant\"", "training.grad_accum_steps=2"}, kDocs);
    const fs::path a = case_dir() / "straight", b = case_dir() / "resumed";
    Proc pa = run(llmtrain_args(a, plus({"run.max_steps=8"}, common)));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb1 = run(llmtrain_args(b, plus({"run.max_steps=4"}, common)));
    ASSERT_EQ(pb1.code, 0) << pb1.err;
    Proc pb2 = run(llmtrain_args(b, plus({"run.max_steps=8"}, common)));
    ASSERT_EQ(pb2.code, 0) << pb2.err;
    expect_resume_is_exact(a, b, pa.out, pb2.out);
}

TEST_F(E2E, DocumentMaskOffIsTheDefaultBitwise) {
    const fs::path a = case_dir() / "unnamed", b = case_dir() / "off";
    Proc pa = run(llmtrain_args(a, {"run.max_steps=4"}));
    ASSERT_EQ(pa.code, 0) << pa.err;
    Proc pb = run(llmtrain_args(b, {"run.max_steps=4", "data.document_mask=false", "data.reset_position_ids=false"}));
    ASSERT_EQ(pb.code, 0) << pb.err;
    EXPECT_EQ(train_losses(a), train_losses(b));
    EXPECT_EQ(pa.out.find("documents:"), std::string::npos) << pa.out;
}

int main(int argc, char** argv) { return e2e_main(argc, argv); }
