// Elementwise ops, the sum of squares, row gathers and their scatter-add, column-block copies and
// their sums (MLA's splits and joins), f32 <-> bf16 conversions.
#include <algorithm>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
__global__ void FillKernel(T* x, int64_t n, float v) {
  const T t = Cvt<T>(v);
  MOE_CUDA_LOOP(i, n) x[i] = t;
}
template <typename T>
__global__ void AxpyKernel(T* y, float a, const T* x, int64_t n) {
  MOE_CUDA_LOOP(i, n) y[i] = Cvt<T>(Ld(y[i]) + a * Ld(x[i]));
}
template <typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  MOE_CUDA_LOOP(i, n) out[i] = Cvt<T>(Ld(a[i]) + Ld(b[i]));
}
template <typename T>
__global__ void ScaleKernel(T* x, float a, int64_t n) {
  MOE_CUDA_LOOP(i, n) x[i] = Cvt<T>(Ld(x[i]) * a);
}
// One partial sum per block, in double; the host adds the partials in a fixed order.
template <typename T>
__global__ void SumSquaresKernel(const T* x, int64_t n, double* partial) {
  double s = 0;
  MOE_CUDA_LOOP(i, n) {
    const double v = Ld(x[i]);
    s += v * v;
  }
  __shared__ double shared[kThreads];
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}
// Rows move in units of U (4-byte words when the row allows, else 2-byte halves).
template <typename U>
__global__ void GatherRowsKernel(const U* src, const int32_t* index, U* dst, int64_t rows,
                                 int64_t units, int64_t src_rows, unsigned* bad) {
  MOE_CUDA_LOOP(i, rows * units) {
    const int64_t r = i / units, c = i % units, from = index[r];
    dst[i] = InRange(from, src_rows, bad, kBadRowIndex) ? src[from * units + c] : U(0);
  }
}
// dst[index[r]] += src[r]: the indices are distinct, so each element has one writer (no atomics).
template <typename T>
__global__ void ScatterAddRowsKernel(const T* src, const int32_t* index, T* dst, int64_t rows,
                                     int64_t cols, int64_t dst_rows, unsigned* bad) {
  MOE_CUDA_LOOP(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols, to = index[r];
    if (!InRange(to, dst_rows, bad, kBadRowIndex)) continue;
    T* d = dst + to * cols + c;
    *d = Cvt<T>(Ld(*d) + Ld(src[i]));
  }
}
// dst[r, dst_col + c] = src[r / broadcast, src_col + c], as bits (U: the element's size).
template <typename U>
__global__ void CopyColumnsKernel(const U* src, int64_t src_cols, int64_t src_col, U* dst,
                                  int64_t dst_cols, int64_t dst_col, int64_t rows, int64_t width,
                                  int64_t broadcast) {
  MOE_CUDA_LOOP(i, rows * width) {
    const int64_t r = i / width, c = i % width;
    dst[r * dst_cols + dst_col + c] = src[(r / broadcast) * src_cols + src_col + c];
  }
}
// dst[r, dst_col + c] += sum_{j < group} src[r * group + j, src_col + c], added in order of j in
// fp32.
template <typename T>
__global__ void SumColumnsKernel(const T* src, int64_t src_cols, int64_t src_col, T* dst,
                                 int64_t dst_cols, int64_t dst_col, int64_t rows, int64_t width,
                                 int64_t group) {
  MOE_CUDA_LOOP(i, rows * width) {
    const int64_t r = i / width, c = i % width;
    T* d = dst + r * dst_cols + dst_col + c;
    float acc = Ld(*d);
    for (int64_t j = 0; j < group; ++j) acc += Ld(src[(r * group + j) * src_cols + src_col + c]);
    *d = Cvt<T>(acc);
  }
}
__global__ void F32ToBf16Kernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  MOE_CUDA_LOOP(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}
__global__ void Bf16ToF32Kernel(const __nv_bfloat16* src, float* dst, int64_t n) {
  MOE_CUDA_LOOP(i, n) dst[i] = __bfloat162float(src[i]);
}

template <typename T>
double SumSquaresOf(const T* x, int64_t n) {
  if (n <= 0) return 0;
  RegisterCudaAllocator();
  const unsigned blocks = std::min<unsigned>(Blocks(n), 1024);
  Tensor partial = Tensor::Empty({static_cast<int64_t>(blocks)}, DType::kF64, CurrentDevice());
  SumSquaresKernel<T><<<blocks, kThreads, 0, Stream()>>>(x, n, partial.data<double>());
  if (double* dst = CurrentDeviceSumTarget(); dst != nullptr) {  // SumSquaresInto: no host read
    AddPartialsOnDevice(partial.data<double>(), blocks, dst);
    return 0;
  }
  std::vector<double> host(blocks);
  cudaMemcpyAsync(host.data(), partial.raw(), sizeof(double) * blocks, cudaMemcpyDeviceToHost,
                  Stream());
  cudaStreamSynchronize(Stream());
  double total = 0;
  for (double v : host) total += v;
  return total;
}

}  // namespace

void Fill(const Tensor& t, double value) {
  CheckOnCuda({&t}, "Fill");
  if (t.dtype() == DType::kI32 && value == 0.0) {
    t.SetZero();
    return;
  }
  const int64_t n = t.numel();
  MOE_CUDA_TYPED(StorageType({&t}, "Fill"), T, {
    if (n > 0)
      FillKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<T>(t), n, static_cast<float>(value));
  });
  CheckLaunch("Fill");
}

void Axpy(const Tensor& y, double alpha, const Tensor& x) {
  CheckOnCuda({&y, &x}, "Axpy");
  const int64_t n = y.numel();
  MOE_CUDA_TYPED(StorageType({&y, &x}, "Axpy"), T, {
    if (n > 0)
      AxpyKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<T>(y), static_cast<float>(alpha),
                                                          Ptr<T>(x), n);
  });
  CheckLaunch("Axpy");
}

void Add(const Tensor& out, const Tensor& a, const Tensor& b) {
  CheckOnCuda({&out, &a, &b}, "Add");
  const int64_t n = out.numel();
  MOE_CUDA_TYPED(StorageType({&out, &a, &b}, "Add"), T, {
    if (n > 0)
      AddKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<T>(out), Ptr<T>(a), Ptr<T>(b), n);
  });
  CheckLaunch("Add");
}

void Scale(const Tensor& t, double s) {
  CheckOnCuda({&t}, "Scale");
  const int64_t n = t.numel();
  MOE_CUDA_TYPED(StorageType({&t}, "Scale"), T, {
    if (n > 0)
      ScaleKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<T>(t), static_cast<float>(s), n);
  });
  CheckLaunch("Scale");
}

double SumSquares(const Tensor& t) {
  CheckOnCuda({&t}, "SumSquares");
  double r = 0;
  MOE_CUDA_TYPED(StorageType({&t}, "SumSquares"), T, r = SumSquaresOf<T>(Ptr<T>(t), t.numel()));
  CheckLaunch("SumSquares");
  return r;
}

void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  CheckOnCuda({&src, &index, &dst}, "GatherRows");
  const int64_t rows = dst.dim(0),
                row_bytes = dst.dim(1) * static_cast<int64_t>(DTypeSize(dst.dtype()));
  if (rows > 0 && row_bytes > 0) {
    const bool words =
        row_bytes % 4 == 0 &&
        (reinterpret_cast<uintptr_t>(src.raw()) | reinterpret_cast<uintptr_t>(dst.raw())) % 4 == 0;
    if (words) {
      const int64_t units = row_bytes / 4;
      GatherRowsKernel<uint32_t><<<Blocks(rows * units), kThreads, 0, Stream()>>>(
          Ptr<const uint32_t>(src), Ptr<int32_t>(index), Ptr<uint32_t>(dst), rows, units,
          src.dim(0), BadIndexFlags());
    } else {
      const int64_t units = row_bytes / 2;
      GatherRowsKernel<uint16_t><<<Blocks(rows * units), kThreads, 0, Stream()>>>(
          Ptr<const uint16_t>(src), Ptr<int32_t>(index), Ptr<uint16_t>(dst), rows, units,
          src.dim(0), BadIndexFlags());
    }
  }
  CheckLaunch("GatherRows");
}

void ScatterAddRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  CheckOnCuda({&src, &index, &dst}, "ScatterAddRows");
  const int64_t rows = src.dim(0), cols = src.dim(1);
  MOE_CUDA_TYPED(StorageType({&src, &dst}, "ScatterAddRows"), T, {
    if (rows * cols > 0) {
      ScatterAddRowsKernel<T><<<Blocks(rows * cols), kThreads, 0, Stream()>>>(
          Ptr<T>(src), Ptr<int32_t>(index), Ptr<T>(dst), rows, cols, dst.dim(0), BadIndexFlags());
    }
  });
  CheckLaunch("ScatterAddRows");
}

void CopyColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col,
                 int64_t width, int64_t broadcast) {
  CheckOnCuda({&src, &dst}, "CopyColumns");
  const DType dt = StorageType({&src, &dst}, "CopyColumns");
  const int64_t rows = dst.dim(0), n = rows * width;
  if (n > 0 && dt == DType::kBF16) {
    CopyColumnsKernel<uint16_t><<<Blocks(n), kThreads, 0, Stream()>>>(
        Ptr<uint16_t>(src), src.dim(1), src_col, Ptr<uint16_t>(dst), dst.dim(1), dst_col, rows,
        width, broadcast);
  } else if (n > 0) {
    CopyColumnsKernel<uint32_t><<<Blocks(n), kThreads, 0, Stream()>>>(
        Ptr<uint32_t>(src), src.dim(1), src_col, Ptr<uint32_t>(dst), dst.dim(1), dst_col, rows,
        width, broadcast);
  }
  CheckLaunch("CopyColumns");
}

void SumColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col,
                int64_t width, int64_t group) {
  CheckOnCuda({&src, &dst}, "SumColumns");
  const int64_t rows = dst.dim(0), n = rows * width;
  MOE_CUDA_TYPED(StorageType({&src, &dst}, "SumColumns"), T, {
    if (n > 0) {
      SumColumnsKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(
          Ptr<T>(src), src.dim(1), src_col, Ptr<T>(dst), dst.dim(1), dst_col, rows, width, group);
    }
  });
  CheckLaunch("SumColumns");
}

void Convert(const Tensor& src, const Tensor& dst) {
  CheckOnCuda({&src, &dst}, "Convert");
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    dst.CopyFrom(src);
  } else if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    if (n > 0)
      F32ToBf16Kernel<<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<float>(src), Ptr<bf16>(dst), n);
  } else if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    if (n > 0)
      Bf16ToF32Kernel<<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<bf16>(src), Ptr<float>(dst), n);
  } else {
    MOE_CHECK(false) << "Convert on CUDA: " << DTypeName(src.dtype()) << " to "
                     << DTypeName(dst.dtype()) << " is not supported";
  }
  CheckLaunch("Convert");
}

}  // namespace moe::kernels::cuda
