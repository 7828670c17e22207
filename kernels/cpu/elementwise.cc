// The CPU elementwise ops, reductions, row gathers and dtype conversions; and the bf16 scope every
// CPU kernel family runs bf16 calls through.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {

bool HasBf16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && t->dtype() == DType::kBF16) return true;
  }
  return false;
}

void Convert(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) {
    dst.CopyFrom(src);
    return;
  }
  const int64_t n = dst.numel();
  ParallelFor(n, 1, [&](int64_t b, int64_t e) {
    switch (dst.dtype()) {
      case DType::kBF16: {
        BFloat16* d = dst.data<BFloat16>();
        for (int64_t i = b; i < e; ++i) d[i] = ToBFloat16(LoadAs<float>(src, i));
        break;
      }
      case DType::kF32: {
        float* d = dst.data<float>();
        for (int64_t i = b; i < e; ++i) d[i] = LoadAs<float>(src, i);
        break;
      }
      case DType::kF64: {
        double* d = dst.data<double>();
        for (int64_t i = b; i < e; ++i) d[i] = LoadAs<double>(src, i);
        break;
      }
      default:
        MOE_CHECK(false) << "Convert takes floating tensors, got " << DTypeName(dst.dtype());
    }
  });
}

Tensor Bf16Scope::In(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::kBF16) return t;
  Tensor f = Tensor::Empty(t.shape(), DType::kF32);
  Convert(t, f);
  return f;
}

Tensor Bf16Scope::Out(const Tensor& t, bool read) {
  if (!t.defined() || t.dtype() != DType::kBF16) return t;
  Tensor f = read ? In(t) : Tensor::Empty(t.shape(), DType::kF32);
  outputs_.emplace_back(t, f);
  return f;
}

Bf16Scope::~Bf16Scope() {
  for (const auto& [dst, scratch] : outputs_) Convert(scratch, dst);
}

void FillUniform(const Tensor& t, uint64_t seed) {
  if (t.dtype() == DType::kBF16) {
    BFloat16* p = t.data<BFloat16>();
    ParallelFor(t.numel(), 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = ToBFloat16(UniformAt(seed, static_cast<uint64_t>(i)));
    });
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(t.dtype(), T, {
    T* p = t.data<T>();
    ParallelFor(t.numel(), 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        p[i] = static_cast<T>(UniformAt(seed, static_cast<uint64_t>(i)));
    });
  });
}

void Fill(const Tensor& t, double value) {
  if (t.dtype() == DType::kI32) {
    int32_t* p = t.data<int32_t>();
    std::fill(p, p + t.numel(), static_cast<int32_t>(value));
    return;
  }
  if (t.dtype() == DType::kBF16) {
    BFloat16* p = t.data<BFloat16>();
    std::fill(p, p + t.numel(), ToBFloat16(static_cast<float>(value)));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(t.dtype(), T, {
    T* p = t.data<T>();
    ParallelFor(t.numel(), 1,
                [&](int64_t b, int64_t e) { std::fill(p + b, p + e, static_cast<T>(value)); });
  });
}

void Axpy(const Tensor& y, double alpha, const Tensor& x) {
  if (HasBf16({&y, &x})) {
    Bf16Scope s;
    Axpy(s.Out(y, true), alpha, s.In(x));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(y.dtype(), T, {
    T* yp = y.data<T>();
    const T* xp = x.data<T>();
    const T a = static_cast<T>(alpha);
    ParallelFor(y.numel(), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) yp[i] += a * xp[i];
    });
  });
}

void Add(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (HasBf16({&out, &a, &b})) {
    Bf16Scope s;
    Add(s.Out(out), s.In(a), s.In(b));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(out.dtype(), T, {
    T* op = out.data<T>();
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    ParallelFor(out.numel(), 1, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) op[i] = ap[i] + bp[i];
    });
  });
}

void Scale(const Tensor& t, double s) {
  if (HasBf16({&t})) {
    Bf16Scope scope;
    Scale(scope.Out(t, true), s);
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(t.dtype(), T, {
    T* p = t.data<T>();
    const T f = static_cast<T>(s);
    ParallelFor(t.numel(), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] *= f;
    });
  });
}

double SumSquares(const Tensor& t) {
  if (HasBf16({&t})) {
    Bf16Scope s;
    return SumSquares(s.In(t));
  }
  constexpr int64_t kChunk = 4096;
  const int64_t n = t.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  MOE_CPU_FLOAT_DISPATCH(t.dtype(), T, {
    const T* p = t.data<T>();
    ParallelFor(chunks, kChunk, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        double s = 0;
        const int64_t end = std::min(n, (c + 1) * kChunk);
        for (int64_t i = c * kChunk; i < end; ++i)
          s += static_cast<double>(p[i]) * static_cast<double>(p[i]);
        partial[static_cast<size_t>(c)] = s;
      }
    });
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  const int64_t rows = dst.dim(0), d = dst.dim(1), src_rows = src.dim(0);
  const int32_t* idx = index.data<int32_t>();
  const size_t row_bytes = static_cast<size_t>(d) * DTypeSize(dst.dtype());
  const char* s = static_cast<const char*>(src.raw());
  char* o = static_cast<char*>(dst.raw());
  ParallelFor(rows, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      MOE_CHECK(idx[r] >= 0 && idx[r] < src_rows)
          << "GatherRows index " << idx[r] << " out of [0, " << src_rows << ")";
      std::memcpy(o + static_cast<size_t>(r) * row_bytes,
                  s + static_cast<size_t>(idx[r]) * row_bytes, row_bytes);
    }
  });
}

void ScatterAddRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  if (HasBf16({&src, &dst})) {
    Bf16Scope s;
    ScatterAddRows(s.In(src), index, s.Out(dst, true));
    return;
  }
  const int64_t rows = src.dim(0), d = src.dim(1), dst_rows = dst.dim(0);
  const int32_t* idx = index.data<int32_t>();
  MOE_CPU_FLOAT_DISPATCH(src.dtype(), T, {
    const T* sp = src.data<T>();
    T* dp = dst.data<T>();
    // The indices are distinct: every destination row is written by one source row.
    ParallelFor(rows, d, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        MOE_CHECK(idx[r] >= 0 && idx[r] < dst_rows)
            << "ScatterAddRows index " << idx[r] << " out of [0, " << dst_rows << ")";
        T* out = dp + static_cast<int64_t>(idx[r]) * d;
        const T* in = sp + r * d;
        for (int64_t c = 0; c < d; ++c) out[c] += in[c];
      }
    });
  });
}

void CopyColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col,
                 int64_t width, int64_t broadcast) {
  const size_t esize = DTypeSize(dst.dtype());
  const size_t src_ld = static_cast<size_t>(src.dim(1)) * esize,
               dst_ld = static_cast<size_t>(dst.dim(1)) * esize;
  const char* sp = static_cast<const char*>(src.raw()) + static_cast<size_t>(src_col) * esize;
  char* dp = static_cast<char*>(dst.raw()) + static_cast<size_t>(dst_col) * esize;
  const size_t bytes = static_cast<size_t>(width) * esize;
  ParallelFor(dst.dim(0), width, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      std::memcpy(dp + static_cast<size_t>(r) * dst_ld,
                  sp + static_cast<size_t>(r / broadcast) * src_ld, bytes);
    }
  });
}

void SumColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col,
                int64_t width, int64_t group) {
  if (HasBf16({&src, &dst})) {
    Bf16Scope s;
    SumColumns(s.In(src), src_col, s.Out(dst, true), dst_col, width, group);
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(dst.dtype(), T, {
    const T* sp = src.data<T>() + src_col;
    T* dp = dst.data<T>() + dst_col;
    const int64_t src_ld = src.dim(1), dst_ld = dst.dim(1);
    ParallelFor(dst.dim(0), width * group, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* out = dp + r * dst_ld;
        for (int64_t i = 0; i < group; ++i) {  // in order: the sum does not depend on threads
          const T* in = sp + (r * group + i) * src_ld;
          for (int64_t c = 0; c < width; ++c) out[c] += in[c];
        }
      }
    });
  });
}

}  // namespace moe::kernels::cpu
