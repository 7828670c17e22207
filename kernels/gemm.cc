// Device dispatch of the GEMM family (kernels/gemm.h): shapes, then the CPU or CUDA path.
#include "kernels/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_state.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(Gemm)
MOE_KERNEL_BACKENDS(GroupedGemm)
MOE_CPU_KERNEL(GemmAccumulate)
MOE_KERNEL_BACKENDS(GroupedGemmBackwardData)
MOE_KERNEL_BACKENDS(GroupedGemmBackwardWeight)

namespace {

void CheckOffsets(const std::vector<int64_t>& offsets, int64_t groups, int64_t rows) {
  MOE_CHECK(static_cast<int64_t>(offsets.size()) == groups + 1)
      << offsets.size() << " offsets for " << groups << " groups";
  MOE_CHECK(offsets.front() == 0 && offsets.back() == rows)
      << "offsets must span [0, " << rows << "], got [" << offsets.front() << ", " << offsets.back()
      << "]";
  for (size_t g = 0; g + 1 < offsets.size(); ++g)
    MOE_CHECK(offsets[g] <= offsets[g + 1]) << "offsets decrease at " << g;
}

}  // namespace

void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
          double alpha, double beta) {
  MOE_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2) << "Gemm takes 2-D tensors";
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  MOE_CHECK(k == kb && c.dim(0) == m && c.dim(1) == n)
      << "Gemm shapes: a " << a.ShapeString() << (trans_a ? "^T" : "") << ", b " << b.ShapeString()
      << (trans_b ? "^T" : "") << ", c " << c.ShapeString();
  return MOE_DISPATCH(c, Gemm(a, trans_a, b, trans_b, c, alpha, beta));
}

void GemmAccumulate(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                    const Tensor& acc) {
  MOE_CHECK(a.ndim() == 2 && b.ndim() == 2 && acc.ndim() == 2 && acc.dtype() == DType::kF64 &&
            a.dtype() == b.dtype() && a.device() == acc.device() && b.device() == acc.device())
      << "GemmAccumulate takes 2-D a and b of one dtype and an f64 accumulator on their device, "
         "got "
      << DTypeName(a.dtype()) << a.ShapeString() << ", " << DTypeName(b.dtype()) << b.ShapeString()
      << ", " << DTypeName(acc.dtype()) << acc.ShapeString();
  const int64_t m = trans_a ? a.dim(1) : a.dim(0), k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
  MOE_CHECK(k == kb && acc.dim(0) == m && acc.dim(1) == n)
      << "GemmAccumulate shapes: a " << a.ShapeString() << (trans_a ? "^T" : "") << ", b "
      << b.ShapeString() << (trans_b ? "^T" : "") << ", acc " << acc.ShapeString();
  if (acc.device().is_cpu()) return cpu::GemmAccumulate(a, trans_a, b, trans_b, acc);
  // Elsewhere: the product, then its f64 sum (the steps the CPU's epilogue fuses), converted
  // through a bounded f64 staging (2^20 values, 8 MB) rather than an f64 copy of the whole product
  // (a head's [vocab, hidden] is 7.4 GB of it at DeepSeek-V3's sizes).
  const Tensor product = Tensor::Empty({m, n}, a.dtype(), a.device());
  Gemm(a, trans_a, b, trans_b, product);
  const int64_t total = m * n, chunk = std::min<int64_t>(total, int64_t{1} << 20);
  if (a.dtype() == DType::kF64) return Axpy(acc, 1.0, product);
  const Tensor flat = product.Reshape({total}), sum = acc.Reshape({total});
  const Tensor staging = Tensor::Empty({std::max<int64_t>(chunk, 1)}, DType::kF64, a.device());
  for (int64_t i = 0; i < total; i += chunk) {
    const int64_t e = std::min(total, i + chunk);
    const Tensor part = staging.Rows(0, e - i);
    Convert(flat.Rows(i, e), part);
    Axpy(sum.Rows(i, e), 1.0, part);
  }
}

void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                 const Tensor& y) {
  const int64_t groups = w.dim(0), n = w.dim(1), k = w.dim(2);
  CheckOffsets(offsets, groups, x.dim(0));
  MOE_CHECK(x.dim(1) == k && y.dim(0) == x.dim(0) && y.dim(1) == n)
      << "GroupedGemm shapes: x " << x.ShapeString() << ", w " << w.ShapeString() << ", y "
      << y.ShapeString();
  return MOE_DISPATCH(y, GroupedGemm(x, w, offsets, y));
}

void GroupedGemmDeviceCounts(const Tensor& x, const Tensor& w, const Tensor& counts,
                             const Tensor& y) {
  const int64_t groups = w.dim(0), n = w.dim(1), k = w.dim(2);
  MOE_CHECK(counts.dtype() == DType::kI64 && counts.ndim() == 1 && counts.numel() == groups &&
            counts.device() == y.device())
      << "GroupedGemmDeviceCounts: counts must be i64 [" << groups << "] on "
      << y.device().ToString() << ", got " << DTypeName(counts.dtype()) << counts.ShapeString()
      << " on " << counts.device().ToString();
  MOE_CHECK(x.dim(1) == k && y.dim(0) == x.dim(0) && y.dim(1) == n)
      << "GroupedGemmDeviceCounts shapes: x " << x.ShapeString() << ", w " << w.ShapeString()
      << ", y " << y.ShapeString();
#ifdef MOE_WITH_CUDA
  if (y.device().is_cuda() && cuda::GroupedGemmOnDeviceCounts(x, w, counts, y)) return;
#endif
  if (counts.device().is_cuda()) CountHostSync();
  std::vector<int64_t> offsets = {0};
  for (const int64_t c : counts.ToVector<int64_t>()) offsets.push_back(offsets.back() + c);
  GroupedGemm(x, w, offsets, y);
}

void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets,
                             const Tensor& dx) {
  const int64_t groups = w.dim(0), n = w.dim(1), k = w.dim(2);
  CheckOffsets(offsets, groups, dy.dim(0));
  MOE_CHECK(dy.dim(1) == n && dx.dim(0) == dy.dim(0) && dx.dim(1) == k)
      << "GroupedGemmBackwardData shapes: dy " << dy.ShapeString() << ", w " << w.ShapeString()
      << ", dx " << dx.ShapeString();
  return MOE_DISPATCH(dx, GroupedGemmBackwardData(dy, w, offsets, dx));
}

void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x,
                               const std::vector<int64_t>& offsets, const Tensor& dw) {
  const int64_t groups = dw.dim(0), n = dw.dim(1), k = dw.dim(2);
  CheckOffsets(offsets, groups, dy.dim(0));
  MOE_CHECK(dy.dim(1) == n && x.dim(0) == dy.dim(0) && x.dim(1) == k)
      << "GroupedGemmBackwardWeight shapes: dy " << dy.ShapeString() << ", x " << x.ShapeString()
      << ", dw " << dw.ShapeString();
  return MOE_DISPATCH(dw, GroupedGemmBackwardWeight(dy, x, offsets, dw));
}

}  // namespace moe::kernels
