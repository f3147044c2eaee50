// app/sampler.cpp — top-k sampling and generation (see sampler.hpp).
#include "app/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace llmtrain {

int sample_top_k(const std::vector<float>& logits, int k, float temperature, std::mt19937_64& rng) {
    const int V = int(logits.size());
    std::vector<int> ids(V);
    std::iota(ids.begin(), ids.end(), 0);
    auto higher = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    if (temperature <= 0) return *std::min_element(ids.begin(), ids.end(), higher);
    if (k <= 0 || k > V) k = V;
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), higher);
    // Softmax over the top k in double, shifted by the max for stability.
    std::vector<double> p(k);
    const double top = logits[ids[0]];
    double sum = 0;
    for (int i = 0; i < k; ++i) sum += p[i] = std::exp((double(logits[ids[i]]) - top) / temperature);
    const double u = double(rng() >> 11) * 0x1.0p-53 * sum;  // uniform in [0, sum)
    double acc = 0;
    for (int i = 0; i < k; ++i) {
        acc += p[i];
        if (u < acc) return ids[i];
    }
    return ids[k - 1];
}

std::vector<int32_t> generate(GPT& gpt, int eos_id, int n_tokens, int top_k, float temperature,
                              std::mt19937_64& rng) {
    return generate([&](const int* in, int pos) { return gpt.logits_at(in, pos); }, gpt.options().B,
                    gpt.window_length(), eos_id, n_tokens, top_k, temperature, rng);
}

std::vector<int32_t> generate(const LogitsAt& logits_at, int B, int T, int eos_id, int n_tokens, int top_k,
                              float temperature, std::mt19937_64& rng) {
    std::vector<int32_t> seq = {eos_id}, out;
    std::vector<int> inputs(size_t(B) * T, eos_id);  // (B,T); rows 1.. are filler
    for (int n = 0; n < n_tokens; ++n) {
        const int len = std::min<int>(int(seq.size()), T);
        std::copy(seq.end() - len, seq.end(), inputs.begin());  // row 0: the last T tokens
        const int next = sample_top_k(logits_at(inputs.data(), len - 1), top_k, temperature, rng);
        if (next == eos_id) break;
        seq.push_back(next);
        out.push_back(next);
    }
    return out;
}

}  // namespace llmtrain
