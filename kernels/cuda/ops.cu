// Tensor-level CUDA entry points (kernels/cuda/ops.h): device and dtype checks, then the launchers.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>

#include "common/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops.h"
#include "kernels/elementwise.h"

namespace moe::kernels::cuda {
namespace {

// Kernels run on the legacy default stream: NCCL's communicator waits for it before each collective.
constexpr cudaStream_t kStream = nullptr;

void CheckCuda(std::initializer_list<const Tensor*> tensors, const char* op) {
  for (const Tensor* t : tensors) {
    if (t->defined()) MOE_CHECK(t->device().is_cuda()) << op << ": a " << t->device().ToString() << " tensor among CUDA ones";
  }
}

// The storage type all of `tensors` share (f32 or bf16).
DType Common(std::initializer_list<const Tensor*> tensors, const char* op) {
  DType d = DType::kF32;
  bool first = true;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    MOE_CHECK(t->dtype() == DType::kF32 || t->dtype() == DType::kBF16)
        << op << ": CUDA kernels take f32 or bf16, got " << DTypeName(t->dtype());
    MOE_CHECK(first || t->dtype() == d) << op << ": mixed dtypes " << DTypeName(d) << " and " << DTypeName(t->dtype());
    d = t->dtype();
    first = false;
  }
  return d;
}

void CheckF32(const Tensor& t, const char* op, const char* what) {
  MOE_CHECK(!t.defined() || t.dtype() == DType::kF32) << op << ": " << what << " must be f32 on CUDA, got " << DTypeName(t.dtype());
}

cudaDataType_t CudaType(DType d) { return d == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

template <typename T>
T* P(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw()) : nullptr;
}

// Calls BODY with T bound to float or bf16.
#define MOE_CUDA_TYPED(dtype, T, ...)                  \
  do {                                                 \
    if ((dtype) == DType::kBF16) {                     \
      using T = bf16;                                  \
      __VA_ARGS__;                                     \
    } else {                                           \
      using T = float;                                 \
      __VA_ARGS__;                                     \
    }                                                  \
  } while (0)

void Launched(const char* op) {
  const std::string e = LastError();
  MOE_CHECK(e.empty()) << op << ": " << e;
}

}  // namespace

void Fill(const Tensor& t, double value) {
  CheckCuda({&t}, "Fill");
  if (t.dtype() == DType::kI32 && value == 0.0) {
    t.SetZero();
    return;
  }
  MOE_CUDA_TYPED(Common({&t}, "Fill"), T, Fill<T>(P<T>(t), t.numel(), static_cast<float>(value), kStream));
  Launched("Fill");
}

void Axpy(const Tensor& y, double alpha, const Tensor& x) {
  CheckCuda({&y, &x}, "Axpy");
  MOE_CUDA_TYPED(Common({&y, &x}, "Axpy"), T, Axpy<T>(P<T>(y), static_cast<float>(alpha), P<T>(x), y.numel(), kStream));
  Launched("Axpy");
}

void Add(const Tensor& out, const Tensor& a, const Tensor& b) {
  CheckCuda({&out, &a, &b}, "Add");
  MOE_CUDA_TYPED(Common({&out, &a, &b}, "Add"), T, Add<T>(P<T>(out), P<T>(a), P<T>(b), out.numel(), kStream));
  Launched("Add");
}

void Scale(const Tensor& t, double s) {
  CheckCuda({&t}, "Scale");
  MOE_CUDA_TYPED(Common({&t}, "Scale"), T, Scale<T>(P<T>(t), static_cast<float>(s), t.numel(), kStream));
  Launched("Scale");
}

double SumSquares(const Tensor& t) {
  CheckCuda({&t}, "SumSquares");
  double r = 0;
  MOE_CUDA_TYPED(Common({&t}, "SumSquares"), T, r = SumSquares<T>(P<T>(t), t.numel(), kStream));
  Launched("SumSquares");
  return r;
}

void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  CheckCuda({&src, &index, &dst}, "GatherRows");
  GatherRows(src.raw(), P<int32_t>(index), dst.raw(), dst.dim(0), dst.dim(1) * static_cast<int64_t>(DTypeSize(dst.dtype())),
             kStream);
  Launched("GatherRows");
}

void Convert(const Tensor& src, const Tensor& dst) {
  CheckCuda({&src, &dst}, "Convert");
  if (src.dtype() == dst.dtype()) {
    dst.CopyFrom(src);
  } else if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    ConvertF32ToBf16(P<float>(src), P<bf16>(dst), src.numel(), kStream);
  } else if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    ConvertBf16ToF32(P<bf16>(src), P<float>(dst), src.numel(), kStream);
  } else {
    MOE_CHECK(false) << "Convert on CUDA: " << DTypeName(src.dtype()) << " to " << DTypeName(dst.dtype()) << " is not supported";
  }
  Launched("Convert");
}

void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta) {
  CheckCuda({&a, &b, &c}, "Gemm");
  const DType ab = Common({&a, &b}, "Gemm");
  Common({&c}, "Gemm");
  const int64_t m = c.dim(0), n = c.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  Gemm(trans_a, trans_b, m, n, k, static_cast<float>(alpha), a.raw(), a.dim(1), b.raw(), b.dim(1), CudaType(ab),
       static_cast<float>(beta), c.raw(), c.dim(1), CudaType(c.dtype()), kStream);
  Launched("Gemm");
}

namespace {
// Group g's rows of a [R, cols] tensor, as a byte address.
const void* RowPtr(const Tensor& t, int64_t row) {
  return static_cast<const char*>(t.raw()) + static_cast<size_t>(row * t.dim(1)) * DTypeSize(t.dtype());
}
void* RowPtrMut(const Tensor& t, int64_t row) { return const_cast<void*>(RowPtr(t, row)); }
// fn(group, first row, rows) for every non-empty group.
template <typename Fn>
void ForEachGroup(const std::vector<int64_t>& offsets, Fn&& fn) {
  for (size_t g = 0; g + 1 < offsets.size(); ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    if (rows > 0) fn(static_cast<int64_t>(g), r0, rows);
  }
}
const void* Slice(const Tensor& w, int64_t g) {
  return static_cast<const char*>(w.raw()) + static_cast<size_t>(g * w.dim(1) * w.dim(2)) * DTypeSize(w.dtype());
}
}  // namespace

// Grouped GEMMs as one cuBLAS call per non-empty group (the expert loop of Megatron's
// non-grouped path); a persistent grouped kernel would save the launch per expert.
void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& y) {
  CheckCuda({&x, &w, &y}, "GroupedGemm");
  const DType d = Common({&x, &w, &y}, "GroupedGemm");
  const int64_t n = w.dim(1), k = w.dim(2);
  ForEachGroup(offsets, [&](int64_t g, int64_t r0, int64_t rows) {
    Gemm(false, true, rows, n, k, 1.f, RowPtr(x, r0), k, Slice(w, g), k, CudaType(d), 0.f, RowPtrMut(y, r0), n, CudaType(d),
         kStream);
  });
  Launched("GroupedGemm");
}

void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& dx) {
  CheckCuda({&dy, &w, &dx}, "GroupedGemmBackwardData");
  const DType d = Common({&dy, &w, &dx}, "GroupedGemmBackwardData");
  const int64_t n = w.dim(1), k = w.dim(2);
  ForEachGroup(offsets, [&](int64_t g, int64_t r0, int64_t rows) {
    Gemm(false, false, rows, k, n, 1.f, RowPtr(dy, r0), n, Slice(w, g), k, CudaType(d), 0.f, RowPtrMut(dx, r0), k, CudaType(d),
         kStream);
  });
  Launched("GroupedGemmBackwardData");
}

void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, const Tensor& dw) {
  CheckCuda({&dy, &x, &dw}, "GroupedGemmBackwardWeight");
  const DType d = Common({&dy, &x}, "GroupedGemmBackwardWeight");
  Common({&dw}, "GroupedGemmBackwardWeight");
  const int64_t n = dw.dim(1), k = dw.dim(2);
  ForEachGroup(offsets, [&](int64_t g, int64_t r0, int64_t rows) {
    Gemm(true, false, n, k, rows, 1.f, RowPtr(dy, r0), n, RowPtr(x, r0), k, CudaType(d), 1.f, const_cast<void*>(Slice(dw, g)), k,
         CudaType(dw.dtype()), kStream);
  });
  Launched("GroupedGemmBackwardWeight");
}

void RmsNormForward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd) {
  CheckCuda({&x, &w, &y, &rstd}, "RmsNormForward");
  CheckF32(rstd, "RmsNormForward", "rstd");
  MOE_CUDA_TYPED(Common({&x, &w, &y}, "RmsNormForward"), T,
                 RmsNormForward<T>(P<T>(x), P<T>(w), static_cast<float>(eps), P<T>(y), P<float>(rstd), x.dim(0), x.dim(1), kStream));
  Launched("RmsNormForward");
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
  CheckCuda({&dy, &x, &w, &rstd, &dx, &dw}, "RmsNormBackward");
  CheckF32(rstd, "RmsNormBackward", "rstd");
  CheckF32(dw, "RmsNormBackward", "dw (a parameter gradient)");
  MOE_CUDA_TYPED(Common({&dy, &x, &w, &dx}, "RmsNormBackward"), T,
                 RmsNormBackward<T>(P<T>(dy), P<T>(x), P<T>(w), P<float>(rstd), P<T>(dx), P<float>(dw), x.dim(0), x.dim(1), kStream));
  Launched("RmsNormBackward");
}

void RopeForward(const Tensor& qkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta) {
  CheckCuda({&qkv}, "RopeForward");
  MOE_CUDA_TYPED(Common({&qkv}, "RopeForward"), T, Rope<T>(P<T>(qkv), qkv.dim(0), seq_len, heads, head_dim, theta, false, kStream));
  Launched("RopeForward");
}

void RopeBackward(const Tensor& dqkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta) {
  CheckCuda({&dqkv}, "RopeBackward");
  MOE_CUDA_TYPED(Common({&dqkv}, "RopeBackward"), T, Rope<T>(P<T>(dqkv), dqkv.dim(0), seq_len, heads, head_dim, theta, true, kStream));
  Launched("RopeBackward");
}

void SwigluForward(const Tensor& gate_up, const Tensor& out) {
  CheckCuda({&gate_up, &out}, "SwigluForward");
  MOE_CUDA_TYPED(Common({&gate_up, &out}, "SwigluForward"), T,
                 SwigluForward<T>(P<T>(gate_up), P<T>(out), out.dim(0), out.dim(1), kStream));
  Launched("SwigluForward");
}

void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up) {
  CheckCuda({&gate_up, &dout, &dgate_up}, "SwigluBackward");
  MOE_CUDA_TYPED(Common({&gate_up, &dout, &dgate_up}, "SwigluBackward"), T,
                 SwigluBackward<T>(P<T>(gate_up), P<T>(dout), P<T>(dgate_up), dout.dim(0), dout.dim(1), kStream));
  Launched("SwigluBackward");
}

void AttentionForward(const Tensor& qkv, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim, const Tensor& out,
                      const Tensor& probs) {
  CheckCuda({&qkv, &out, &probs}, "AttentionForward");
  Tensor scores = Tensor::Empty({heads, seq_len, seq_len}, DType::kF32, qkv.device());
  MOE_CUDA_TYPED(Common({&qkv, &out, &probs}, "AttentionForward"), T,
                 AttentionForward<T>(P<T>(qkv), batch, seq_len, heads, head_dim, P<T>(out), P<T>(probs), P<float>(scores), kStream));
  Launched("AttentionForward");
}

void AttentionBackward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t batch, int64_t seq_len,
                       int64_t heads, int64_t head_dim, const Tensor& dqkv) {
  CheckCuda({&qkv, &probs, &dout, &dqkv}, "AttentionBackward");
  const DType d = Common({&qkv, &probs, &dout, &dqkv}, "AttentionBackward");
  Tensor dp = Tensor::Empty({heads, seq_len, seq_len}, DType::kF32, qkv.device());
  Tensor ds = Tensor::Empty({heads, seq_len, seq_len}, d, qkv.device());
  MOE_CUDA_TYPED(d, T,
                 AttentionBackward<T>(P<T>(qkv), P<T>(probs), P<T>(dout), batch, seq_len, heads, head_dim, P<T>(dqkv),
                                      P<float>(dp), P<T>(ds), kStream));
  Launched("AttentionBackward");
}

double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale, const Tensor& dlogits) {
  CheckCuda({&logits, &targets, &dlogits}, "CrossEntropy");
  double r = 0;
  MOE_CUDA_TYPED(Common({&logits, &dlogits}, "CrossEntropy"), T,
                 r = CrossEntropy<T>(P<T>(logits), P<int32_t>(targets), logits.dim(0), logits.dim(1),
                                     static_cast<float>(grad_scale), P<T>(dlogits), kStream));
  Launched("CrossEntropy");
  return r;
}

void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out) {
  CheckCuda({&table, &ids, &out}, "EmbeddingForward");
  MOE_CUDA_TYPED(Common({&table, &out}, "EmbeddingForward"), T,
                 EmbeddingForward<T>(P<T>(table), P<int32_t>(ids), P<T>(out), out.dim(0), out.dim(1), kStream));
  Launched("EmbeddingForward");
}

void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  CheckCuda({&dout, &ids, &dtable}, "EmbeddingBackward");
  CheckF32(dtable, "EmbeddingBackward", "dtable (a parameter gradient)");
  MOE_CUDA_TYPED(Common({&dout}, "EmbeddingBackward"), T,
                 EmbeddingBackward<T>(P<T>(dout), P<int32_t>(ids), P<float>(dtable), dout.dim(0), dout.dim(1), kStream));
  Launched("EmbeddingBackward");
}

void RouterForward(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg, const Tensor& scores,
                   const Tensor& topk_idx, const Tensor& topk_w) {
  CheckCuda({&logits, &bias, &scores, &topk_idx, &topk_w}, "RouterForward");
  for (const Tensor* t : {&logits, &bias, &scores, &topk_w}) CheckF32(*t, "RouterForward", "every routing tensor");
  const bool ok = RouterForward(P<float>(logits), P<float>(bias), logits.dim(0), logits.dim(1), cfg.top_k, cfg.num_groups,
                                cfg.topk_groups, cfg.sigmoid, static_cast<float>(cfg.route_scale), cfg.use_bias,
                                P<float>(scores), P<int32_t>(topk_idx), P<float>(topk_w), kStream);
  MOE_CHECK(ok) << "RouterForward on CUDA: at most 512 experts and 64 groups, got " << logits.dim(1) << " and " << cfg.num_groups;
  Launched("RouterForward");
}

void RouterBackward(const Tensor& scores, const Tensor& topk_idx, const Tensor& dtopk_w, const Tensor& dscores_extra,
                    const RouterConfig& cfg, const Tensor& dlogits) {
  CheckCuda({&scores, &topk_idx, &dtopk_w, &dscores_extra, &dlogits}, "RouterBackward");
  for (const Tensor* t : {&scores, &dtopk_w, &dscores_extra, &dlogits}) CheckF32(*t, "RouterBackward", "every routing tensor");
  const bool ok = RouterBackward(P<float>(scores), P<int32_t>(topk_idx), P<float>(dtopk_w), P<float>(dscores_extra),
                                 scores.dim(0), scores.dim(1), cfg.top_k, cfg.sigmoid, static_cast<float>(cfg.route_scale),
                                 P<float>(dlogits), kStream);
  MOE_CHECK(ok) << "RouterBackward on CUDA: at most 512 experts, got " << scores.dim(1);
  Launched("RouterBackward");
}

double SeqAuxLoss(const Tensor& scores, const Tensor& topk_idx, int64_t num_seqs, int64_t seq_len, double coeff,
                  const Tensor& dscores) {
  CheckCuda({&scores, &topk_idx, &dscores}, "SeqAuxLoss");
  CheckF32(scores, "SeqAuxLoss", "scores");
  CheckF32(dscores, "SeqAuxLoss", "dscores");
  MOE_CHECK(scores.dim(1) <= 512) << "SeqAuxLoss on CUDA: at most 512 experts, got " << scores.dim(1);
  const double r = SeqAuxLoss(P<float>(scores), P<int32_t>(topk_idx), num_seqs, seq_len, scores.dim(1), topk_idx.dim(1),
                              static_cast<float>(coeff), P<float>(dscores), kStream);
  Launched("SeqAuxLoss");
  return r;
}

void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx) {
  CheckCuda({&dxp, &row_of_slot, &dx}, "PermuteBackward");
  MOE_CUDA_TYPED(Common({&dxp, &dx}, "PermuteBackward"), T,
                 PermuteBackward<T>(P<T>(dxp), P<int32_t>(row_of_slot), P<T>(dx), dx.dim(0), row_of_slot.dim(1), dx.dim(1), kStream));
  Launched("PermuteBackward");
}

void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y) {
  CheckCuda({&yp, &row_of_slot, &w, &y}, "CombineForward");
  MOE_CUDA_TYPED(Common({&yp, &w, &y}, "CombineForward"), T,
                 CombineForward<T>(P<T>(yp), P<int32_t>(row_of_slot), P<T>(w), P<T>(y), y.dim(0), row_of_slot.dim(1), y.dim(1),
                                   kStream));
  Launched("CombineForward");
}

void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& dyp,
                     const Tensor& dw) {
  CheckCuda({&dy, &yp, &row_of_slot, &w, &dyp, &dw}, "CombineBackward");
  MOE_CUDA_TYPED(Common({&dy, &yp, &w, &dyp, &dw}, "CombineBackward"), T,
                 CombineBackward<T>(P<T>(dy), P<T>(yp), P<int32_t>(row_of_slot), P<T>(w), P<T>(dyp), P<T>(dw), dy.dim(0),
                                    row_of_slot.dim(1), dy.dim(1), kStream));
  Launched("CombineBackward");
}

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWConfig& cfg) {
  CheckCuda({&param, &grad, &m, &v}, "AdamW");
  for (const Tensor* t : {&param, &grad, &m, &v}) CheckF32(*t, "AdamW", "master weights, gradients and moments");
  AdamW(P<float>(param), P<float>(grad), P<float>(m), P<float>(v), param.numel(), static_cast<float>(cfg.lr),
        static_cast<float>(cfg.beta1), static_cast<float>(cfg.beta2), static_cast<float>(cfg.eps),
        static_cast<float>(cfg.weight_decay), cfg.step, static_cast<float>(cfg.grad_scale), kStream);
  Launched("AdamW");
}

int DeviceCount(std::string* problem) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  cudaGetLastError();
  // No driver at all (a CPU machine) reads as "insufficient driver" too: tell it apart by loading it.
  bool driver = false;
  if (void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    driver = true;
    ::dlclose(lib);
  }
  if (problem != nullptr && e != cudaErrorNoDevice && driver) {
    *problem = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  return 0;
}

std::string DeviceName(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "cuda:" + std::to_string(index) + " (" + LastError() + ")";
  return prop.name;
}

Status UseDevice(int index) {
  std::string problem;
  const int n = DeviceCount(&problem);
  if (index < 0 || index >= n) {
    return FailedPreconditionError("cuda:" + std::to_string(index) + ": this machine has " + std::to_string(n) +
                                   " usable CUDA device(s)" + (problem.empty() ? "" : " (" + problem + ")"));
  }
  if (cudaSetDevice(index) != cudaSuccess) return UnavailableError("cudaSetDevice(" + std::to_string(index) + "): " + LastError());
  RegisterCudaAllocator();
  return OkStatus();
}

std::string Synchronize() {
  if (cudaDeviceSynchronize() != cudaSuccess) return LastError();
  return "";
}

void FillUniform(const Tensor& t, uint64_t seed) {
  // A block of host values (a 64-bit LCG's top bits, uniform in [-1, 1)) tiled over the tensor.
  Tensor block = Tensor::Empty({std::min<int64_t>(t.numel(), int64_t{1} << 20)}, DType::kF32);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < block.numel(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    block.data<float>()[i] = static_cast<float>(static_cast<double>(x >> 11) * 0x1p-52 - 1.0);
  }
  Tensor staged = Tensor::Empty(block.shape(), t.dtype());
  kernels::Convert(block, staged);
  const size_t esize = DTypeSize(t.dtype());
  for (int64_t at = 0; at < t.numel(); at += block.numel()) {
    const int64_t n = std::min(block.numel(), t.numel() - at);
    GetAllocator(t.device())->CopyFromHost(static_cast<char*>(t.raw()) + static_cast<size_t>(at) * esize, staged.raw(),
                                           static_cast<size_t>(n) * esize);
  }
}

double MeasureBf16GemmFlops(int64_t size, int reps) {
  RegisterCudaAllocator();
  int index = 0;
  cudaGetDevice(&index);
  const Device dev = Device::Cuda(index);
  Tensor a = Tensor::Empty({size, size}, DType::kBF16, dev), b = Tensor::Empty({size, size}, DType::kBF16, dev);
  Tensor c = Tensor::Empty({size, size}, DType::kBF16, dev);
  FillUniform(a, 1);
  FillUniform(b, 2);
  Gemm(a, false, b, true, c, 1.0, 0.0);  // warm-up: cuBLAS picks its kernel
  Synchronize();
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    Gemm(a, false, b, true, c, 1.0, 0.0);
    Synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(size) * static_cast<double>(size) * static_cast<double>(size) / s);
  }
  return best;
}

}  // namespace moe::kernels::cuda
