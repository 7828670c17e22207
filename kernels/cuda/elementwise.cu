// Elementwise ops (16-byte vector kernels where the pointers allow), the sum of squares, row
// gathers and their scatter-add, column-block copies and their sums (MLA's splits and joins), f32
// <-> bf16 conversions.
#include <algorithm>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

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

void FillUniform(const Tensor& t, uint64_t seed) {
  CheckOnCuda({&t}, "FillUniform");
  const int64_t n = t.numel();
  MOE_CUDA_TYPED(StorageType({&t}, "FillUniform"), T, {
    if (n > 0) UniformKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<T>(t), n, seed);
  });
  CheckLaunch("FillUniform");
}

void Axpy(const Tensor& y, double alpha, const Tensor& x) {
  CheckOnCuda({&y, &x}, "Axpy");
  const int64_t n = y.numel();
  MOE_CUDA_TYPED(StorageType({&y, &x}, "Axpy"), T, {
    if (VectorOk(n, {y.raw(), x.raw()})) {
      AxpyVecKernel<T><<<Blocks(n / Vec16<T>::kLanes), kThreads, 0, Stream()>>>(
          Ptr<T>(y), static_cast<float>(alpha), Ptr<T>(x), n);
    } else if (n > 0) {
      AxpyKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<T>(y), static_cast<float>(alpha),
                                                          Ptr<T>(x), n);
    }
  });
  CheckLaunch("Axpy");
}

void Add(const Tensor& out, const Tensor& a, const Tensor& b) {
  CheckOnCuda({&out, &a, &b}, "Add");
  const int64_t n = out.numel();
  MOE_CUDA_TYPED(StorageType({&out, &a, &b}, "Add"), T, {
    if (VectorOk(n, {out.raw(), a.raw(), b.raw()})) {
      AddVecKernel<T><<<Blocks(n / Vec16<T>::kLanes), kThreads, 0, Stream()>>>(
          Ptr<T>(out), Ptr<T>(a), Ptr<T>(b), n);
    } else if (n > 0) {
      AddKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<T>(out), Ptr<T>(a), Ptr<T>(b), n);
    }
  });
  CheckLaunch("Add");
}

void Scale(const Tensor& t, double s) {
  CheckOnCuda({&t}, "Scale");
  const int64_t n = t.numel();
  MOE_CUDA_TYPED(StorageType({&t}, "Scale"), T, {
    if (VectorOk(n, {t.raw()})) {
      ScaleVecKernel<T><<<Blocks(n / Vec16<T>::kLanes), kThreads, 0, Stream()>>>(
          Ptr<T>(t), static_cast<float>(s), n);
    } else if (n > 0) {
      ScaleKernel<T><<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<T>(t), static_cast<float>(s), n);
    }
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
    const uintptr_t addresses =
        reinterpret_cast<uintptr_t>(src.raw()) | reinterpret_cast<uintptr_t>(dst.raw());
    if (row_bytes % 16 == 0 && addresses % 16 == 0) {  // 16-byte vectors: the MoE permutation's
      using V = Vec16<uint32_t>;
      const int64_t units = row_bytes / 16;
      GatherRowsKernel<V><<<Blocks(rows * units), kThreads, 0, Stream()>>>(
          Ptr<const V>(src), Ptr<int32_t>(index), Ptr<V>(dst), rows, units, src.dim(0),
          BadIndexFlags());
    } else if (row_bytes % 4 == 0 && addresses % 4 == 0) {
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
    if (VectorOk(n, {src.raw(), dst.raw()}))
      F32ToBf16VecKernel<<<Blocks(n / 8), kThreads, 0, Stream()>>>(Ptr<float>(src), Ptr<bf16>(dst),
                                                                   n);
    else if (n > 0)
      F32ToBf16Kernel<<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<float>(src), Ptr<bf16>(dst), n);
  } else if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    if (VectorOk(n, {src.raw(), dst.raw()}))
      Bf16ToF32VecKernel<<<Blocks(n / 8), kThreads, 0, Stream()>>>(Ptr<bf16>(src), Ptr<float>(dst),
                                                                   n);
    else if (n > 0)
      Bf16ToF32Kernel<<<Blocks(n), kThreads, 0, Stream()>>>(Ptr<bf16>(src), Ptr<float>(dst), n);
  } else {
    MOE_CHECK(false) << "Convert on CUDA: " << DTypeName(src.dtype()) << " to "
                     << DTypeName(dst.dtype()) << " is not supported";
  }
  CheckLaunch("Convert");
}

}  // namespace moe::kernels::cuda
