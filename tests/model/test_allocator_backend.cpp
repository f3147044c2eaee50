// tests/model/test_allocator_backend.cpp — the allocator's per-category current/peak accounting
// (closed-form byte sums) and make_backend's choices and error messages.
#include "model/allocator.hpp"
#include "model/backend.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

TEST(Allocator, CurrentAndPeakByCategory) {
    auto ops = make_backend("cpu", "fp32");
    Allocator a(*ops);
    void* p = a.alloc(MemCategory::params, 1000);
    void* x = a.alloc(MemCategory::activations, 300);
    void* y = a.alloc(MemCategory::activations, 200);
    EXPECT_EQ(a.current(MemCategory::activations), 500u);
    a.release(x);
    void* z = a.alloc(MemCategory::activations, 100);
    EXPECT_EQ(a.current(MemCategory::activations), 300u);
    EXPECT_EQ(a.peak(MemCategory::activations), 500u);
    EXPECT_EQ(a.current(MemCategory::params), 1000u);
    EXPECT_EQ(a.peak_total(), 1500u);
    EXPECT_EQ(a.current_total(), 1300u);
    EXPECT_EQ(a.peak(MemCategory::grads), 0u);
    EXPECT_THROW(a.release(reinterpret_cast<void*>(0x1234)), std::logic_error);
    a.release(p);
    a.release(y);
    a.release(z);
    EXPECT_EQ(a.current_total(), 0u);
    EXPECT_STREQ(mem_category_name(MemCategory::optimizer), "optimizer");
}

TEST(Backend, ChoosesCpuAndExplainsErrors) {
    EXPECT_STREQ(make_backend("cpu", "fp32")->name(), "cpu");
    EXPECT_EQ(make_backend("cpu", "fp32")->act_dtype(), DType::f32);
    EXPECT_THROW(make_backend("cpu", "bf16"), std::runtime_error);
    EXPECT_THROW(make_backend("tpu", "fp32"), std::runtime_error);
    EXPECT_THROW(make_backend("cpu", "fp16"), std::runtime_error);
    // Without a CUDA build or device the error must say so; with one, we get the CUDA backend.
    try {
        EXPECT_STREQ(make_backend("cuda", "bf16")->name(), "cuda");
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace llmtrain::test
