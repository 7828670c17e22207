// CUTLASS's Hopper grouped GEMM (3.x API): one kernel for every expert's GEMM, problem shapes,
// operand pointers and strides read from device arrays. Tile 128x128x64 over a 1x2 cluster (B
// multicast to both CTAs) with the cooperative schedule: the shape CUTLASS's own Hopper grouped
// GEMM example runs for bf16; tuning it is the GPU step's work (docs/benchmarks.md).
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cutlass/version.h"
#include "kernels/cuda/sm90a/grouped_gemm.h"

namespace moe::kernels::cuda::sm90a {
namespace {

using namespace cute;  // NOLINT: CUTLASS's shape vocabulary (Shape, _128, ...)

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
using Element = cutlass::bfloat16_t;
using Accumulator = float;
using LayoutX = cutlass::layout::RowMajor;     // x: m x k, rows
using LayoutW = cutlass::layout::ColumnMajor;  // w_g: n x k row-major is k x n column-major
using LayoutY = cutlass::layout::RowMajor;
constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // 8 bf16: 16 bytes
using TileShape = Shape<_128, _128, _64>;
using ClusterShape = Shape<_1, _2, _1>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, Accumulator, Accumulator, Element, LayoutY*,
    kAlignment, Element, LayoutY*, kAlignment,
    cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
    cutlass::epilogue::fusion::LinearCombination<Element, Accumulator>>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutX*, kAlignment, Element,
    LayoutW*, kAlignment, Accumulator, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
using StrideX = typename Kernel::InternalStrideA;
using StrideW = typename Kernel::InternalStrideB;
using StrideY = typename Kernel::InternalStrideD;
using Shape3 = typename ProblemShape::UnderlyingProblemShape;

// The per-group arrays the kernel reads, laid out in one host block and copied to the device at
// once.
struct Groups {
  std::vector<Shape3> shapes;
  std::vector<const Element*> x, w;
  std::vector<Element*> y;
  std::vector<StrideX> sx;
  std::vector<StrideW> sw;
  std::vector<StrideY> sy;
};

Groups Describe(const void* x, const void* w, void* y, const std::vector<int64_t>& offsets,
                int64_t n, int64_t k) {
  Groups g;
  const auto* xb = static_cast<const Element*>(x);
  const auto* wb = static_cast<const Element*>(w);
  auto* yb = static_cast<Element*>(y);
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int m = static_cast<int>(offsets[e + 1] - offsets[e]);
    if (m <= 0) continue;
    g.shapes.push_back({m, static_cast<int>(n), static_cast<int>(k)});
    g.x.push_back(xb + offsets[e] * k);
    g.w.push_back(wb + static_cast<int64_t>(e) * n * k);
    g.y.push_back(yb + offsets[e] * n);
    g.sx.push_back(cutlass::make_cute_packed_stride(StrideX{}, {m, static_cast<int>(k), 1}));
    g.sw.push_back(
        cutlass::make_cute_packed_stride(StrideW{}, {static_cast<int>(n), static_cast<int>(k), 1}));
    g.sy.push_back(cutlass::make_cute_packed_stride(StrideY{}, {m, static_cast<int>(n), 1}));
  }
  return g;
}

// Appends v's bytes to `block` at a 16-byte boundary; returns their offset.
template <typename T>
size_t Append(std::vector<char>* block, const std::vector<T>& v) {
  const size_t at = (block->size() + 15) / 16 * 16;
  block->resize(at + v.size() * sizeof(T));
  std::memcpy(block->data() + at, v.data(), v.size() * sizeof(T));
  return at;
}

bool IsSm90(int device, std::string* why) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major == 9 && minor == 0) return true;
  *why = "CUTLASS's grouped GEMM is built for sm_90a; this device is sm_" + std::to_string(major) +
         std::to_string(minor);
  return false;
}

bool Implementable(int64_t n, int64_t k, std::string* why) {
  if (n % kAlignment == 0 && k % kAlignment == 0 && n < (int64_t{1} << 31) &&
      k < (int64_t{1} << 31))
    return true;
  *why = "n and k must be multiples of 8 (16-byte TMA alignment), got n=" + std::to_string(n) +
         " k=" + std::to_string(k);
  return false;
}

int SmCount(int device) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms;
}

// Group g's problem from the device counts: the arrays Describe builds on the host. A thread per
// group sums the counts before its own (at most a few hundred experts: no scan needed).
__global__ void DescribeOnDeviceKernel(const Element* x, const Element* w, Element* y,
                                       const int64_t* counts, int groups, int64_t rows, int n,
                                       int k, Shape3* shapes, const Element** xs,
                                       const Element** ws, Element** ys, StrideX* sx, StrideW* sw,
                                       StrideY* sy) {
  const int g = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (g >= groups) return;
  int64_t first = 0;
  for (int i = 0; i < g; ++i) first += counts[i];
  first = first < 0 ? 0 : (first > rows ? rows : first);
  int64_t end = first + counts[g];
  end = end < first ? first : (end > rows ? rows : end);
  const int m = static_cast<int>(end - first);
  shapes[g] = Shape3{m, n, k};
  xs[g] = x + first * k;
  ws[g] = w + static_cast<int64_t>(g) * n * k;
  ys[g] = y + first * n;
  sx[g] = cutlass::make_cute_packed_stride(StrideX{}, {m, k, 1});
  sw[g] = cutlass::make_cute_packed_stride(StrideW{}, {n, k, 1});
  sy[g] = cutlass::make_cute_packed_stride(StrideY{}, {m, n, 1});
}

// Runs the GEMM over `groups` problems with their arrays at `dev` (laid out at `at`, on the
// device).
bool Run(int groups, char* dev, const size_t at[7], int device, cudaStream_t stream,
         std::string* why) {
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = SmCount(device);
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {groups, reinterpret_cast<Shape3*>(dev + at[0]), nullptr},
      {reinterpret_cast<const Element**>(dev + at[1]), reinterpret_cast<StrideX*>(dev + at[4]),
       reinterpret_cast<const Element**>(dev + at[2]), reinterpret_cast<StrideW*>(dev + at[5])},
      {{1.0f, 0.0f},
       reinterpret_cast<const Element**>(dev + at[3]),
       reinterpret_cast<StrideY*>(dev + at[6]),
       reinterpret_cast<Element**>(dev + at[3]),
       reinterpret_cast<StrideY*>(dev + at[6])},
      hw};
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    *why = "CUTLASS cannot implement this grouped GEMM";
    return false;
  }
  void* workspace = nullptr;
  const size_t bytes = Gemm::get_workspace_size(args);
  if (bytes > 0 && cudaMallocAsync(&workspace, bytes, stream) != cudaSuccess) {
    *why = "no device memory for CUTLASS's workspace";
    return false;
  }
  cutlass::Status st = gemm.initialize(args, workspace, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
  if (workspace != nullptr) cudaFreeAsync(workspace, stream);
  if (st != cutlass::Status::kSuccess) *why = cutlassGetStatusString(st);
  return st == cutlass::Status::kSuccess;
}

}  // namespace

std::string CutlassVersion() {
  return std::to_string(CUTLASS_MAJOR) + "." + std::to_string(CUTLASS_MINOR) + "." +
         std::to_string(CUTLASS_PATCH);
}

bool GroupedGemmBf16(const void* x, const void* w, void* y, const std::vector<int64_t>& offsets,
                     int64_t n, int64_t k, void* stream_ptr, std::string* why) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  cudaGetDevice(&device);
  if (!IsSm90(device, why) || !Implementable(n, k, why)) return false;
  const Groups g = Describe(x, w, y, offsets, n, k);
  if (g.shapes.empty()) return true;  // no rows in any group: nothing to compute
  std::vector<char> block;
  const size_t at[7] = {Append(&block, g.shapes), Append(&block, g.x),  Append(&block, g.w),
                        Append(&block, g.y),      Append(&block, g.sx), Append(&block, g.sw),
                        Append(&block, g.sy)};
  char* dev = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&dev), block.size(), stream) != cudaSuccess) {
    *why = "no device memory for the grouped GEMM's arguments";
    return false;
  }
  // Pageable source: the copy has read `block` when cudaMemcpyAsync returns.
  cudaMemcpyAsync(dev, block.data(), block.size(), cudaMemcpyHostToDevice, stream);
  const bool ok = Run(static_cast<int>(g.shapes.size()), dev, at, device, stream, why);
  cudaFreeAsync(dev, stream);
  return ok;
}

bool GroupedGemmBf16DeviceCounts(const void* x, const void* w, void* y, const int64_t* counts_dev,
                                 int64_t groups, int64_t rows, int64_t n, int64_t k,
                                 void* stream_ptr, std::string* why) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  cudaGetDevice(&device);
  if (!IsSm90(device, why) || !Implementable(n, k, why)) return false;
  if (groups <= 0 || rows <= 0) return true;
  // The arrays' block: each array 16-byte aligned, in Run's order.
  const size_t count = static_cast<size_t>(groups);
  const size_t sizes[7] = {sizeof(Shape3),  sizeof(Element*), sizeof(Element*), sizeof(Element*),
                           sizeof(StrideX), sizeof(StrideW),  sizeof(StrideY)};
  size_t at[7], bytes = 0;
  for (int i = 0; i < 7; ++i) {
    at[i] = (bytes + 15) / 16 * 16;
    bytes = at[i] + sizes[i] * count;
  }
  char* dev = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&dev), bytes, stream) != cudaSuccess) {
    *why = "no device memory for the grouped GEMM's arguments";
    return false;
  }
  DescribeOnDeviceKernel<<<static_cast<unsigned>((groups + 127) / 128), 128, 0, stream>>>(
      static_cast<const Element*>(x), static_cast<const Element*>(w), static_cast<Element*>(y),
      counts_dev, static_cast<int>(groups), rows, static_cast<int>(n), static_cast<int>(k),
      reinterpret_cast<Shape3*>(dev + at[0]), reinterpret_cast<const Element**>(dev + at[1]),
      reinterpret_cast<const Element**>(dev + at[2]), reinterpret_cast<Element**>(dev + at[3]),
      reinterpret_cast<StrideX*>(dev + at[4]), reinterpret_cast<StrideW*>(dev + at[5]),
      reinterpret_cast<StrideY*>(dev + at[6]));
  const bool ok = cudaGetLastError() == cudaSuccess &&
                  Run(static_cast<int>(groups), dev, at, device, stream, why);
  if (!ok && why->empty()) *why = "the grouped GEMM's argument kernel did not launch";
  cudaFreeAsync(dev, stream);
  return ok;
}

}  // namespace moe::kernels::cuda::sm90a
