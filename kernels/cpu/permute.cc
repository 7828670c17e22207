#include "kernels/permute.h"

#include <cstring>

#include "kernels/cpu/parallel.h"
#ifdef MOE_WITH_CUDA
#include "kernels/cuda/ops.h"
#endif

namespace moe::kernels {

DispatchPlan BuildDispatchPlan(const int32_t* topk_idx, int64_t num_tokens, int64_t top_k, int64_t num_experts) {
  DispatchPlan plan;
  plan.num_tokens = num_tokens;
  plan.top_k = top_k;
  plan.num_experts = num_experts;
  const int64_t slots = num_tokens * top_k;
  plan.counts.assign(static_cast<size_t>(num_experts), 0);
  for (int64_t s = 0; s < slots; ++s) {
    MOE_CHECK(topk_idx[s] >= 0 && topk_idx[s] < num_experts) << "expert " << topk_idx[s] << " out of range";
    ++plan.counts[static_cast<size_t>(topk_idx[s])];
  }
  plan.offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (int64_t e = 0; e < num_experts; ++e) plan.offsets[static_cast<size_t>(e) + 1] = plan.offsets[static_cast<size_t>(e)] + plan.counts[static_cast<size_t>(e)];
  std::vector<int64_t> next(plan.offsets.begin(), plan.offsets.end() - 1);
  plan.token_of_row.resize(static_cast<size_t>(slots));
  plan.row_of_slot.resize(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t row = next[static_cast<size_t>(topk_idx[s])]++;
    plan.row_of_slot[static_cast<size_t>(s)] = static_cast<int32_t>(row);
    plan.token_of_row[static_cast<size_t>(row)] = static_cast<int32_t>(s / top_k);
  }
  return plan;
}

void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx) {
  const int64_t tokens = dx.dim(0), d = dx.dim(1), k = row_of_slot.dim(1);
  MOE_CHECK(row_of_slot.dtype() == DType::kI32 && row_of_slot.dim(0) == tokens && dxp.dim(1) == d)
      << "PermuteBackward: dxp " << dxp.ShapeString() << ", row_of_slot " << row_of_slot.ShapeString() << ", dx " << dx.ShapeString();
  MOE_DISPATCH_CUDA(dx, PermuteBackward(dxp, row_of_slot, dx));
  if (cpu::HasBf16({&dxp, &dx})) {
    cpu::Bf16Scope s;
    PermuteBackward(s.In(dxp), row_of_slot, s.Out(dx));
    return;
  }
  const int32_t* rows = row_of_slot.data<int32_t>();
  MOE_CPU_FLOAT_DISPATCH(dx.dtype(), T, {
    const T* src = dxp.data<T>();
    T* out = dx.data<T>();
    ParallelFor(tokens, d * k, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        T* o = out + t * d;
        std::memcpy(o, src + static_cast<int64_t>(rows[t * k]) * d, sizeof(T) * static_cast<size_t>(d));
        for (int64_t j = 1; j < k; ++j) {
          const T* r = src + static_cast<int64_t>(rows[t * k + j]) * d;
          for (int64_t c = 0; c < d; ++c) o[c] += r[c];
        }
      }
    });
  });
}

void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y) {
  const int64_t tokens = y.dim(0), d = y.dim(1), k = row_of_slot.dim(1);
  MOE_CHECK(row_of_slot.dim(0) == tokens && w.shape() == row_of_slot.shape() && yp.dim(1) == d)
      << "CombineForward: yp " << yp.ShapeString() << ", w " << w.ShapeString() << ", y " << y.ShapeString();
  MOE_DISPATCH_CUDA(y, CombineForward(yp, row_of_slot, w, y));
  if (cpu::HasBf16({&yp, &w, &y})) {
    cpu::Bf16Scope s;
    CombineForward(s.In(yp), row_of_slot, s.In(w), s.Out(y, true));
    return;
  }
  const int32_t* rows = row_of_slot.data<int32_t>();
  MOE_CPU_FLOAT_DISPATCH(y.dtype(), T, {
    const T* src = yp.data<T>();
    const T* wp = w.data<T>();
    T* out = y.data<T>();
    ParallelFor(tokens, d * k, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        T* o = out + t * d;
        for (int64_t j = 0; j < k; ++j) {
          const T* r = src + static_cast<int64_t>(rows[t * k + j]) * d;
          const T wt = wp[t * k + j];
          for (int64_t c = 0; c < d; ++c) o[c] += wt * r[c];
        }
      }
    });
  });
}

void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& dyp,
                     const Tensor& dw) {
  const int64_t tokens = dy.dim(0), d = dy.dim(1), k = row_of_slot.dim(1);
  MOE_CHECK(row_of_slot.dim(0) == tokens && w.shape() == row_of_slot.shape() && dw.shape() == w.shape() &&
            yp.shape() == dyp.shape() && yp.dim(1) == d)
      << "CombineBackward shapes";
  MOE_DISPATCH_CUDA(dyp, CombineBackward(dy, yp, row_of_slot, w, dyp, dw));
  if (cpu::HasBf16({&dy, &yp, &w, &dyp, &dw})) {
    cpu::Bf16Scope s;
    CombineBackward(s.In(dy), s.In(yp), row_of_slot, s.In(w), s.Out(dyp), s.Out(dw));
    return;
  }
  const int32_t* rows = row_of_slot.data<int32_t>();
  MOE_CPU_FLOAT_DISPATCH(dy.dtype(), T, {
    const T* g = dy.data<T>();
    const T* src = yp.data<T>();
    const T* wp = w.data<T>();
    T* dsrc = dyp.data<T>();
    T* dwp = dw.data<T>();
    ParallelFor(tokens, 2 * d * k, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const T* gt = g + t * d;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t row = rows[t * k + j];
          const T* r = src + row * d;
          T* dr = dsrc + row * d;
          const T wt = wp[t * k + j];
          T dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += gt[c] * r[c];
            dr[c] = wt * gt[c];
          }
          dwp[t * k + j] = dot;
        }
      }
    });
  });
}

}  // namespace moe::kernels
