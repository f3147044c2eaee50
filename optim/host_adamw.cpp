// optim/host_adamw.cpp — the host AdamW step for each grad/param dtype pair (see host_adamw.hpp).
#include "optim/host_adamw.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "model/cpu/adamw_kernel.hpp"

namespace llmtrain {

namespace {

template <class G>
void with_params(float* w, float* m, float* v, const G* g, void* params, DType param_t, size_t n,
                 const AdamWCoeffs& c, bool stochastic, size_t index0) {
    if (params == nullptr)
        cpu::adamw_loop<false>(w, m, v, g, static_cast<cpu::NoParams*>(nullptr), n, c, index0);
    else if (param_t == DType::f32)
        cpu::adamw_loop<false>(w, m, v, g, static_cast<float*>(params), n, c, index0);
    else if (stochastic)
        cpu::adamw_loop<true>(w, m, v, g, static_cast<uint16_t*>(params), n, c, index0);
    else
        cpu::adamw_loop<false>(w, m, v, g, static_cast<uint16_t*>(params), n, c, index0);
}

}  // namespace

void host_adamw(float* w, float* m, float* v, const void* grads, DType grad_t, void* params, DType param_t,
                size_t n, const HostAdamWStep& st) {
    if (grad_t == DType::u8 || (params != nullptr && param_t == DType::u8))
        throw std::invalid_argument("host_adamw: grads and params must be fp32 or bf16");
    if (st.t < 1) throw std::invalid_argument("host_adamw: step count t must be >= 1, got " + std::to_string(st.t));
    const AdamWCoeffs c = adamw_coeffs(st.lr, st.beta1, st.beta2, st.eps, st.weight_decay, st.grad_scale, st.t);
    if (grad_t == DType::f32)
        with_params(w, m, v, static_cast<const float*>(grads), params, param_t, n, c, st.stochastic_rounding,
                    st.index0);
    else
        with_params(w, m, v, static_cast<const uint16_t*>(grads), params, param_t, n, c, st.stochastic_rounding,
                    st.index0);
}

}  // namespace llmtrain
