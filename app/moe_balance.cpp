// app/moe_balance.cpp — MoeBalance and load_imbalance (app/moe_balance.hpp).
#include "app/moe_balance.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace llmtrain {

double load_imbalance(const int64_t* counts, int E) {
    int64_t sum = 0, mx = 0;
    for (int e = 0; e < E; ++e) {
        sum += counts[e];
        mx = std::max(mx, counts[e]);
    }
    return sum == 0 ? 0.0 : double(mx) * double(E) / double(sum);
}

MoeBalance::MoeBalance(int n_layer_, int E_)
    : n_layer(n_layer_), E(E_), step_load(size_t(n_layer_) * size_t(E_), 0), window_load(step_load),
      bias(step_load.size(), 0.0f) {}

void MoeBalance::update_bias(float rate) {
    for (int l = 0; l < n_layer; ++l) {
        const int64_t* row = step_load.data() + size_t(l) * size_t(E);
        int64_t sum = 0;
        for (int e = 0; e < E; ++e) sum += row[e];
        for (int e = 0; e < E; ++e) {
            const int64_t d = row[e] * E - sum;  // E * (load - mean)
            float& b = bias[size_t(l) * size_t(E) + size_t(e)];
            if (d > 0) b -= rate;
            else if (d < 0) b += rate;
        }
    }
}

void MoeBalance::add_step(double aux_, const std::vector<int64_t>& load) {
    if (load.size() != step_load.size()) throw std::invalid_argument("MoeBalance::add_step: load of the wrong size");
    aux = aux_;
    step_load = load;
    for (size_t i = 0; i < load.size(); ++i) window_load[i] += load[i];
}

std::string MoeBalance::take_window_line(int64_t step, int64_t max_steps) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "step %lld/%lld | moe aux %.5g | load max/mean by layer", (long long)step,
                  (long long)max_steps, aux);
    std::string line = buf;
    for (int l = 0; l < n_layer; ++l) {
        std::snprintf(buf, sizeof buf, " %.2f", window_imbalance(l));
        line += buf;
    }
    line += " | by expert (all layers)";
    int64_t total = 0;
    std::vector<int64_t> by_expert(size_t(E), 0);
    for (int l = 0; l < n_layer; ++l)
        for (int e = 0; e < E; ++e) by_expert[size_t(e)] += window_load[size_t(l) * size_t(E) + size_t(e)];
    for (int64_t v : by_expert) total += v;
    for (int64_t v : by_expert) {
        std::snprintf(buf, sizeof buf, " %.1f%%", total ? 100.0 * double(v) / double(total) : 0.0);
        line += buf;
    }
    std::fill(window_load.begin(), window_load.end(), 0);
    return line;
}

}  // namespace llmtrain
