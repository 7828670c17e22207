// The CUDA backend's entry points: what the device dispatch (kernels/<family>.cc) calls for CUDA
// tensors, one block per family, each defined in kernels/cuda/<family>.cu, and the device facts of
// kernels/cuda/runtime.cu. Each entry checks devices and dtypes, then launches on the stream of
// kernels/cuda/common.cuh. Shapes are the public header's (kernels/<family>.h); the callers checked them.
//
// Storage types: activations and weights f32 or bf16 (loaded as stored, computed and accumulated in
// fp32); accumulated parameter gradients (RMSNorm's dw, the embedding table's) and RMSNorm's rstd f32;
// the router family and AdamW f32 only (the router GEMM writes fp32 logits, as DeepSeek-V3 routes in
// fp32; AdamW updates the fp32 master weights).
//
// Named cuda_ops.h (and its CPU twin cpu/cpu_ops.h) rather than a bare ops.h: the file name alone, in
// an include line, an editor tab or a compiler message, says which backend it declares. Plain C++ (no
// CUDA headers), so the dispatch files include it in every build; without CUDA nothing calls it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/optimizer.h"
#include "kernels/rope.h"
#include "kernels/router.h"
#include "kernels/tensor.h"

namespace moe::kernels::cuda {

// While one is alive on this thread, the families' host sums (the losses' row partials, the sum of
// squares) add their total into *dst on the device instead, in the same order and in double, and
// return 0: no host read (kernels/dispatch.h AddToSlot).
class DeviceSumTarget {
 public:
  explicit DeviceSumTarget(double* dst);
  ~DeviceSumTarget();
  DeviceSumTarget(const DeviceSumTarget&) = delete;
  DeviceSumTarget& operator=(const DeviceSumTarget&) = delete;

 private:
  double* previous_;
};

// gemm.cu: cuBLAS (cublasGemmEx, fp32 compute); A and B share a type, C may be f32 under bf16 inputs
// (weight gradients, fp32 logits). Grouped GEMMs are one cuBLAS call per non-empty group.
void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta);
void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& y);
void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& dx);
void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, const Tensor& dw);

// fp8.cu: one block per tile (its amax, then e4m3 with the hardware's rounding); one launch per row
// group. x f32 or bf16, out f32.
void Fp8QuantDequant(const Tensor& x, int64_t tile_rows, int64_t tile_cols, const Tensor& out,
                     const std::vector<int64_t>& groups, bool mxfp8);
// fp8_gemm.cu: cuBLASLt's block-scaled e4m3 GEMMs (kernels/fp8.h); Fp8GemmProblem: "" when this
// device runs them and they passed their check against the emulation, else why not (once per process).
void Fp8GemmForward(const Tensor& x, const Tensor& w, const Tensor& y32);
void Fp8GemmDgrad(const Tensor& dy, const Tensor& w, const Tensor& dx32);
void Fp8GemmWgrad(const Tensor& dy, const Tensor& x, const Tensor& dw32, float beta);
std::string Fp8GemmProblem();

// runtime.cu: acc[slot] = the bad-index bits (BadIndexFlags), which it clears; one thread on the device.
void FoldBadIndices(const Tensor& acc, int64_t slot);

// embedding.cu: the backward scatter-adds into an f32 table gradient with atomics (not bitwise
// reproducible, unlike the CPU's counting sort).
void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out);
void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable);

// rmsnorm.cu: one block per row; dw summed over strips of rows, then one atomic per column and strip.
void RmsNormForward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd);
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                     const Tensor& dw);

// rope.cu: in place on the q and k parts; the backward is the inverse rotation.
void RopeForward(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset, const Tensor& inv_freq, RopeLayout layout);
void RopeBackward(const Tensor& dx, int64_t seq_len, int64_t heads, int64_t offset, const Tensor& inv_freq, RopeLayout layout);

// attention.cu: cuBLAS strided-batched GEMMs per sequence and a fused causal softmax (fp32 scores).
void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq_len, int64_t heads,
                      double scale, const Tensor& out, const Tensor& lse);
void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                       const Tensor& lse, int64_t batch, int64_t seq_len, int64_t heads, double scale,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv);

// swiglu.cu
void SwigluForward(const Tensor& gate_up, const Tensor& out);
void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up);

// cross_entropy.cu: one block per row, the gradient in place when dlogits aliases logits.
double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale, const Tensor& dlogits);

// router.cu: one thread per token (at most 512 experts and 64 groups); the balance loss one block per
// sequence. f32 only.
void RouterForward(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg, const Tensor& scores,
                   const Tensor& topk_idx, const Tensor& topk_w);
void RouterBackward(const Tensor& scores, const Tensor& topk_idx, const Tensor& dtopk_w, const Tensor& dscores_extra,
                    const RouterConfig& cfg, const Tensor& dlogits);
double SeqAuxLoss(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len, double coeff,
                  const Tensor& dscores);

// permute.cu: the dispatch plan (a stable counting sort on the device) and the row movements.
void BuildDispatchPlanOnDevice(const Tensor& topk_idx, int64_t num_experts, const Tensor& counts,
                               const Tensor& row_of_slot, const Tensor& token_of_row);
void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx);
void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y);
void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& dyp,
                     const Tensor& dw);

// optimizer.cu: fused AdamW on f32 master weights and gradients; f32 or bf16 moments.
void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWConfig& cfg);

// elementwise.cu. SumSquares adds fp64 block partials on the host in a fixed order. Convert: f32 <-> bf16.
void Fill(const Tensor& t, double value);
void Axpy(const Tensor& y, double alpha, const Tensor& x);
void Add(const Tensor& out, const Tensor& a, const Tensor& b);
void Scale(const Tensor& t, double s);
double SumSquares(const Tensor& t);
void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst);
void ScatterAddRows(const Tensor& src, const Tensor& index, const Tensor& dst);
void CopyColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col, int64_t width, int64_t broadcast);
void SumColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col, int64_t width, int64_t group);
void Convert(const Tensor& src, const Tensor& dst);

// runtime.cu: device facts, behind the device-agnostic kernels/runtime.h.
// GPUs this process can use. 0 when there is none: no device, or no NVIDIA driver at all. When a
// driver is there but CUDA fails (a driver older than the toolkit, a broken device), also 0, and
// `problem` (when given) says why: callers report that instead of skipping quietly.
int DeviceCount(std::string* problem);
std::string DeviceName(int index);
// Makes `index` this process's device and registers the CUDA allocator; an error names the device.
Status UseDevice(int index);
// Waits for the device's queued work; returns the CUDA error's text or "".
std::string Synchronize();
// The dense bf16 GEMM rate of cuBLAS on the current device, measured now (m = n = k = size, best of
// `reps`), in FLOP/s.
double MeasureBf16GemmFlops(int64_t size, int reps);
std::string CheckCublasLoads();  // runtime.cu (kernels/cuda/cublas_api.h)
bool CublasHasGroupedGemm();

}  // namespace moe::kernels::cuda
