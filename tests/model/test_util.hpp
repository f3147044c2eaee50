// tests/model/test_util.hpp — helpers for the op tests: random data, central finite differences
// of double-precision reference functions, and a tolerance check that names the worst element.
#pragma once
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llmtrain::test {

/// n uniform values in [lo, hi) from a fixed seed.
inline std::vector<float> randu(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// Gradient of f at x by central differences, step h (double precision throughout).
inline std::vector<double> finite_diff(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x, double h = 1e-4) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double x0 = x[i];
        x[i] = x0 + h;
        const double fp = f(x);
        x[i] = x0 - h;
        const double fm = f(x);
        x[i] = x0;
        g[i] = (fp - fm) / (2 * h);
    }
    return g;
}

/// Expects |got[i] - want[i]| <= atol + rtol * |want[i]| for every i; reports the worst element.
template <class A, class B>
void expect_close(const std::string& what, const A& got, const B& want, double rtol, double atol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double worst = -INFINITY;  // largest excess over the allowed error
    size_t wi = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
        double excess = err - (atol + rtol * std::fabs(static_cast<double>(want[i])));
        if (std::isnan(excess)) excess = INFINITY;
        if (excess > worst) {
            worst = excess;
            wi = i;
        }
    }
    EXPECT_LE(worst, 0.0) << what << ": element " << wi << " got " << got[wi] << " want " << want[wi]
                          << " (rtol " << rtol << ", atol " << atol << ")";
}

/// max |v[i]|
template <class V>
double max_abs(const V& v) {
    double m = 0.0;
    for (auto x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
    return m;
}

}  // namespace llmtrain::test
