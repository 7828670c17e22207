// The CPU side of the MoE dispatch: the plan (kernels/permute.cc's host reference written into
// tensors), gather-sum (the permutation's backward), the weighted combine and its backward.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/common.h"
#include "kernels/dispatch_plan.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {

void BuildDispatchPlanOnDevice(const Tensor& topk_idx, int64_t num_experts, const Tensor& counts,
                               const Tensor& row_of_slot, const Tensor& token_of_row) {
  const DispatchPlan plan =
      BuildDispatchPlan(topk_idx.data<int32_t>(), topk_idx.dim(0), topk_idx.dim(1), num_experts);
  std::copy(plan.counts.begin(), plan.counts.end(), counts.data<int64_t>());
  std::copy(plan.row_of_slot.begin(), plan.row_of_slot.end(), row_of_slot.data<int32_t>());
  std::copy(plan.token_of_row.begin(), plan.token_of_row.end(), token_of_row.data<int32_t>());
}

void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx) {
  const int64_t tokens = dx.dim(0), d = dx.dim(1), k = row_of_slot.dim(1);
  if (HasBf16({&dxp, &dx})) {
    Bf16Scope s;
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
        std::memcpy(o, src + static_cast<int64_t>(rows[t * k]) * d,
                    sizeof(T) * static_cast<size_t>(d));
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
  if (HasBf16({&yp, &w, &y})) {
    Bf16Scope s;
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

void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w,
                     const Tensor& dyp, const Tensor& dw) {
  const int64_t tokens = dy.dim(0), d = dy.dim(1), k = row_of_slot.dim(1);
  if (HasBf16({&dy, &yp, &w, &dyp, &dw})) {
    Bf16Scope s;
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

}  // namespace moe::kernels::cpu
