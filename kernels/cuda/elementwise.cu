// Elementwise ops, reductions, row gathers, dtype conversions, and the CUDA caching allocator.
#include <algorithm>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/tensor.h"

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
__global__ void GatherRowsKernel(const U* src, const int32_t* index, U* dst, int64_t rows, int64_t units) {
  MOE_CUDA_LOOP(i, rows * units) {
    const int64_t r = i / units, c = i % units;
    dst[i] = src[static_cast<int64_t>(index[r]) * units + c];
  }
}
__global__ void F32ToBf16Kernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  MOE_CUDA_LOOP(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}
__global__ void Bf16ToF32Kernel(const __nv_bfloat16* src, float* dst, int64_t n) {
  MOE_CUDA_LOOP(i, n) dst[i] = __bfloat162float(src[i]);
}

// Device memory through the caching allocator, so a training step never calls cudaMalloc once warm.
// One process drives one device (the trainer calls cudaSetDevice once), so one cache serves it.
class CudaAllocator final : public CachingAllocator {
 public:
  void Memset(void* ptr, int value, size_t bytes) override {
    MOE_CHECK(cudaMemset(ptr, value, bytes) == cudaSuccess) << LastError();
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    MOE_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess) << LastError();
  }
  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    MOE_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess) << LastError();
  }
  void CopyWithin(void* dst, const void* src, size_t bytes) override {
    MOE_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess) << LastError();
  }

 protected:
  void* RawAllocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) == cudaSuccess) return p;
    cudaGetLastError();  // clear the out-of-memory error: the caller releases the cache and retries
    return nullptr;
  }
  void RawFree(void* ptr) override { cudaFree(ptr); }
  size_t Granularity() const override { return 512; }
};

Device CurrentDevice() {
  int index = 0;
  cudaGetDevice(&index);
  return Device::Cuda(index);
}

}  // namespace

std::string LastError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

void RegisterCudaAllocator() {
  static CudaAllocator* a = new CudaAllocator();
  RegisterAllocator(DeviceType::kCuda, a);
}

double SumPartials(int64_t n, cudaStream_t s, const std::function<void(float*)>& launch) {
  if (n <= 0) return 0;
  RegisterCudaAllocator();
  Tensor partial = Tensor::Empty({n}, DType::kF32, CurrentDevice());
  launch(partial.data<float>());
  std::vector<float> host(static_cast<size_t>(n));
  cudaMemcpyAsync(host.data(), partial.raw(), sizeof(float) * host.size(), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  double total = 0;
  for (float v : host) total += v;
  return total;
}

template <typename T>
void Fill(T* x, int64_t n, float value, cudaStream_t s) {
  if (n > 0) FillKernel<T><<<Blocks(n), kThreads, 0, s>>>(x, n, value);
}
template <typename T>
void Axpy(T* y, float alpha, const T* x, int64_t n, cudaStream_t s) {
  if (n > 0) AxpyKernel<T><<<Blocks(n), kThreads, 0, s>>>(y, alpha, x, n);
}
template <typename T>
void Add(T* out, const T* a, const T* b, int64_t n, cudaStream_t s) {
  if (n > 0) AddKernel<T><<<Blocks(n), kThreads, 0, s>>>(out, a, b, n);
}
template <typename T>
void Scale(T* x, float alpha, int64_t n, cudaStream_t s) {
  if (n > 0) ScaleKernel<T><<<Blocks(n), kThreads, 0, s>>>(x, alpha, n);
}
template <typename T>
double SumSquares(const T* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return 0;
  RegisterCudaAllocator();
  const unsigned blocks = std::min<unsigned>(Blocks(n), 1024);
  Tensor partial = Tensor::Empty({static_cast<int64_t>(blocks)}, DType::kF64, CurrentDevice());
  SumSquaresKernel<T><<<blocks, kThreads, 0, s>>>(x, n, partial.data<double>());
  std::vector<double> host(blocks);
  cudaMemcpyAsync(host.data(), partial.raw(), sizeof(double) * blocks, cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  double total = 0;
  for (double v : host) total += v;
  return total;
}
MOE_CUDA_INSTANTIATE(Fill)
MOE_CUDA_INSTANTIATE(Axpy)
MOE_CUDA_INSTANTIATE(Add)
MOE_CUDA_INSTANTIATE(Scale)
MOE_CUDA_INSTANTIATE(SumSquares)

void GatherRows(const void* src, const int32_t* index, void* dst, int64_t rows, int64_t row_bytes, cudaStream_t s) {
  if (rows == 0 || row_bytes == 0) return;
  const bool words = row_bytes % 4 == 0 && (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 4 == 0;
  if (words) {
    const int64_t units = row_bytes / 4;
    GatherRowsKernel<uint32_t><<<Blocks(rows * units), kThreads, 0, s>>>(static_cast<const uint32_t*>(src), index,
                                                                          static_cast<uint32_t*>(dst), rows, units);
  } else {
    const int64_t units = row_bytes / 2;
    GatherRowsKernel<uint16_t><<<Blocks(rows * units), kThreads, 0, s>>>(static_cast<const uint16_t*>(src), index,
                                                                          static_cast<uint16_t*>(dst), rows, units);
  }
}

void ConvertF32ToBf16(const float* src, bf16* dst, int64_t n, cudaStream_t s) {
  if (n > 0) F32ToBf16Kernel<<<Blocks(n), kThreads, 0, s>>>(src, dst, n);
}
void ConvertBf16ToF32(const bf16* src, float* dst, int64_t n, cudaStream_t s) {
  if (n > 0) Bf16ToF32Kernel<<<Blocks(n), kThreads, 0, s>>>(src, dst, n);
}

}  // namespace moe::kernels::cuda
