// Helpers shared by the tests: seeded random tensors, mixed-tolerance comparison that says where it
// broke, NaN poisoning, and central-difference gradient checks in double precision.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/rng.h"
#include "kernels/tensor.h"

namespace moe::testing {

// Uniform in [lo, hi) from a seeded stream.
Tensor RandomTensor(const Tensor::Shape& shape, uint64_t seed, DType dtype = DType::kF64,
                    double lo = -1.0, double hi = 1.0);
Tensor RandomInts(const Tensor::Shape& shape, uint64_t seed, int32_t below);
// Fills with NaN so that an element a kernel forgot to write shows up.
void Poison(const Tensor& t);
// Values as doubles (f32 or f64 host tensors).
std::vector<double> Values(const Tensor& t);

// |actual - expected| <= atol + rtol * |expected| everywhere; on failure reports the worst element,
// both values and the first few mismatches.
::testing::AssertionResult AllClose(const std::vector<double>& actual,
                                    const std::vector<double>& expected, double rtol, double atol);
::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected, double rtol,
                                    double atol);
::testing::AssertionResult AllClose(const Tensor& actual, const std::vector<double>& expected,
                                    double rtol, double atol);

// Compares `analytic` (same shape as `x`, f64) with central differences of `loss` in x's elements:
// (f(x + eps) - f(x - eps)) / (2 eps). Checks every element when there are at most `max_checks`,
// else a seeded sample of them.
::testing::AssertionResult GradientMatches(const std::function<double()>& loss, const Tensor& x,
                                           const Tensor& analytic, double rtol = 1e-5,
                                           double atol = 1e-8, double eps = 1e-6,
                                           int max_checks = 300, uint64_t seed = 7);

// Sum(out * weights): the scalar that turns an op with a tensor output into a loss.
double Dot(const Tensor& out, const Tensor& weights);

}  // namespace moe::testing
