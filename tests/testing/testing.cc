#include "tests/testing/testing.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace moe::testing {

Tensor RandomTensor(const Tensor::Shape& shape, uint64_t seed, DType dtype, double lo, double hi) {
  Tensor t = Tensor::Empty(shape, dtype);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = lo + (hi - lo) * rng.Uniform();
    if (dtype == DType::kF64)
      t.data<double>()[i] = v;
    else
      t.data<float>()[i] = static_cast<float>(v);
  }
  return t;
}

Tensor RandomInts(const Tensor::Shape& shape, uint64_t seed, int32_t below) {
  Tensor t = Tensor::Empty(shape, DType::kI32);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int32_t>()[i] = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(below)));
  return t;
}

void Poison(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kF64)
      t.data<double>()[i] = std::numeric_limits<double>::quiet_NaN();
    else if (t.dtype() == DType::kF32)
      t.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    else if (t.dtype() == DType::kI32)
      t.data<int32_t>()[i] = -777;
  }
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kF64)
      out[static_cast<size_t>(i)] = t.data<double>()[i];
    else if (t.dtype() == DType::kF32)
      out[static_cast<size_t>(i)] = t.data<float>()[i];
    else if (t.dtype() == DType::kI32)
      out[static_cast<size_t>(i)] = t.data<int32_t>()[i];
    else
      ADD_FAILURE() << "Values of a " << DTypeName(t.dtype()) << " tensor";
  }
  return out;
}

::testing::AssertionResult AllClose(const std::vector<double>& actual,
                                    const std::vector<double>& expected, double rtol, double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  }
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  std::ostringstream first;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    const double tol = atol + rtol * std::fabs(e);
    const double err = std::fabs(a - e);
    const bool ok = std::isfinite(a) && err <= tol;
    if (!ok) {
      if (bad < 5) first << "\n  [" << i << "] actual " << a << ", expected " << e;
      ++bad;
      const double excess = std::isfinite(a) ? err / tol : std::numeric_limits<double>::infinity();
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements outside atol " << atol << " + rtol "
         << rtol << "; worst at [" << worst << "]: actual " << actual[worst] << ", expected "
         << expected[worst] << "; first mismatches:" << first.str();
}

::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected, double rtol,
                                    double atol) {
  return AllClose(Values(actual), Values(expected), rtol, atol);
}
::testing::AssertionResult AllClose(const Tensor& actual, const std::vector<double>& expected,
                                    double rtol, double atol) {
  return AllClose(Values(actual), expected, rtol, atol);
}

double Dot(const Tensor& out, const Tensor& weights) {
  const auto a = Values(out), b = Values(weights);
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

::testing::AssertionResult GradientMatches(const std::function<double()>& loss, const Tensor& x,
                                           const Tensor& analytic, double rtol, double atol,
                                           double eps, int max_checks, uint64_t seed) {
  if (x.dtype() != DType::kF64 || analytic.dtype() != DType::kF64 ||
      x.numel() != analytic.numel()) {
    return ::testing::AssertionFailure() << "GradientMatches needs f64 tensors of one size";
  }
  std::vector<int64_t> idx;
  if (x.numel() <= max_checks) {
    for (int64_t i = 0; i < x.numel(); ++i) idx.push_back(i);
  } else {
    Rng rng(seed);
    for (int i = 0; i < max_checks; ++i)
      idx.push_back(static_cast<int64_t>(rng.Below(static_cast<uint64_t>(x.numel()))));
  }
  std::vector<double> numeric, ana;
  double* p = x.data<double>();
  for (int64_t i : idx) {
    const double orig = p[i];
    p[i] = orig + eps;
    const double up = loss();
    p[i] = orig - eps;
    const double down = loss();
    p[i] = orig;
    numeric.push_back((up - down) / (2 * eps));
    ana.push_back(analytic.data<double>()[i]);
  }
  auto r = AllClose(ana, numeric, rtol, atol);
  if (!r)
    r << "\n  (analytic vs central differences over " << idx.size() << " elements of "
      << x.ShapeString() << ")";
  return r;
}

}  // namespace moe::testing
