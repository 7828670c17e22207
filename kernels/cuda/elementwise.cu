#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/tensor.h"

namespace moe::kernels::cuda {
namespace {

__global__ void FillKernel(float* x, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) x[i] = v;
}
__global__ void AxpyKernel(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) y[i] += a * x[i];
}
__global__ void ScaleKernel(float* x, float a, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) x[i] *= a;
}
// One partial sum per block, in double; the host adds the partials in a fixed order.
__global__ void SumSquaresKernel(const float* x, int64_t n, double* partial) {
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    s += static_cast<double>(x[i]) * x[i];
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
__global__ void GatherRowsKernel(const float* src, const int32_t* index, float* dst, int64_t rows, int64_t d) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * d; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / d, c = i % d;
    dst[i] = src[static_cast<int64_t>(index[r]) * d + c];
  }
}

// Device memory through the caching allocator, so a training step never calls cudaMalloc once warm.
class CudaAllocator final : public CachingAllocator {
 public:
  void Memset(void* ptr, int value, size_t bytes) override { MOE_CHECK(cudaMemset(ptr, value, bytes) == cudaSuccess); }
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
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
  }
  void RawFree(void* ptr) override { cudaFree(ptr); }
  size_t Granularity() const override { return 512; }
};

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
  Tensor partial = Tensor::Empty({n}, DType::kF32, Device::Cuda(0));
  launch(partial.data<float>());
  std::vector<float> host(static_cast<size_t>(n));
  cudaMemcpyAsync(host.data(), partial.raw(), sizeof(float) * host.size(), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  double total = 0;
  for (float v : host) total += v;
  return total;
}

void Fill(float* x, int64_t n, float value, cudaStream_t s) { FillKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, value); }
void Axpy(float* y, float alpha, const float* x, int64_t n, cudaStream_t s) { AxpyKernel<<<Blocks(n), kThreads, 0, s>>>(y, alpha, x, n); }
void Scale(float* x, float alpha, int64_t n, cudaStream_t s) { ScaleKernel<<<Blocks(n), kThreads, 0, s>>>(x, alpha, n); }

double SumSquares(const float* x, int64_t n, cudaStream_t s) {
  const unsigned blocks = std::min<unsigned>(Blocks(n), 1024);
  double* partial = nullptr;
  cudaMalloc(&partial, sizeof(double) * blocks);
  SumSquaresKernel<<<blocks, kThreads, 0, s>>>(x, n, partial);
  std::vector<double> host(blocks);
  cudaMemcpyAsync(host.data(), partial, sizeof(double) * blocks, cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  cudaFree(partial);
  double total = 0;
  for (double v : host) total += v;
  return total;
}

void GatherRows(const float* src, const int32_t* index, float* dst, int64_t rows, int64_t d, cudaStream_t s) {
  GatherRowsKernel<<<Blocks(rows * d), kThreads, 0, s>>>(src, index, dst, rows, d);
}

}  // namespace moe::kernels::cuda
