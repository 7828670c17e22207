// CUTLASS's Hopper grouped GEMM (3.x API): one kernel for every expert's GEMM, problem shapes,
// operand pointers and strides read from device arrays. Tile 128x128x64 over a 1x2 cluster (B
// multicast to both CTAs) with the cooperative schedule: the shape CUTLASS's own Hopper grouped
// GEMM example runs for bf16; tuning it is the GPU step's work (docs/benchmarks.md).
#include <cstring>

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

int SmCount(int device) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms;
}

// Runs the GEMM over `g` with its arrays at `dev` (the block Append laid out, on the device).
bool Run(const Groups& g, char* dev, const size_t at[7], int device, cudaStream_t stream,
         std::string* why) {
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = SmCount(device);
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {static_cast<int>(g.shapes.size()), reinterpret_cast<Shape3*>(dev + at[0]), nullptr},
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
                     int64_t n, int64_t k, cudaStream_t stream, std::string* why) {
  int device = 0;
  cudaGetDevice(&device);
  if (!IsSm90(device, why)) return false;
  if (n % kAlignment != 0 || k % kAlignment != 0) {
    *why = "n and k must be multiples of 8 (16-byte TMA alignment), got n=" + std::to_string(n) +
           " k=" + std::to_string(k);
    return false;
  }
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
  const bool ok = Run(g, dev, at, device, stream, why);
  cudaFreeAsync(dev, stream);
  return ok;
}

}  // namespace moe::kernels::cuda::sm90a
