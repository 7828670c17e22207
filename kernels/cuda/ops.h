// Tensor-level entry points of the CUDA kernels: each kernel family's public function (kernels/*.h)
// forwards a call on CUDA tensors here (MOE_DISPATCH_CUDA in kernels/cpu/parallel.h). These check
// devices and dtypes, then launch on the current device's stream through kernels/cuda/cuda_kernels.h.
// Plain C++: the CPU kernel files include it without CUDA headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/optimizer.h"
#include "kernels/router.h"
#include "kernels/tensor.h"

namespace moe::kernels::cuda {

void Fill(const Tensor& t, double value);
void Axpy(const Tensor& y, double alpha, const Tensor& x);
void Add(const Tensor& out, const Tensor& a, const Tensor& b);
void Scale(const Tensor& t, double s);
double SumSquares(const Tensor& t);
void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst);
void Convert(const Tensor& src, const Tensor& dst);

void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta);
void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& y);
void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& dx);
void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, const Tensor& dw);

void RmsNormForward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd);
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                     const Tensor& dw);
void RopeForward(const Tensor& qkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta);
void RopeBackward(const Tensor& dqkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta);
void SwigluForward(const Tensor& gate_up, const Tensor& out);
void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up);
void AttentionForward(const Tensor& qkv, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim, const Tensor& out,
                      const Tensor& probs);
void AttentionBackward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t batch, int64_t seq_len,
                       int64_t heads, int64_t head_dim, const Tensor& dqkv);
double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale, const Tensor& dlogits);
void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out);
void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable);
void RouterForward(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg, const Tensor& scores,
                   const Tensor& topk_idx, const Tensor& topk_w);
void RouterBackward(const Tensor& scores, const Tensor& topk_idx, const Tensor& dtopk_w, const Tensor& dscores_extra,
                    const RouterConfig& cfg, const Tensor& dlogits);
double SeqAuxLoss(const Tensor& scores, const Tensor& topk_idx, int64_t num_seqs, int64_t seq_len, double coeff,
                  const Tensor& dscores);
void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx);
void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y);
void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& dyp,
                     const Tensor& dw);
void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWConfig& cfg);

// Device facts for the trainer and the benchmarks.
// GPUs this process can use. 0 when there is none: no device, or no NVIDIA driver at all. When a
// driver is there but CUDA fails (a driver older than the toolkit, a broken device), also 0, and
// `problem` (when given) says why: callers report that instead of skipping quietly.
int DeviceCount(std::string* problem = nullptr);
std::string DeviceName(int index);
// Makes `index` this process's device and registers the CUDA allocator; an error names the device.
Status UseDevice(int index);
// Waits for the device's queued work (timings); returns the CUDA error text or "".
std::string Synchronize();
// Fills a CUDA tensor (f32 or bf16) with pseudo-random values uniform in [-1, 1) from `seed`: the
// benchmarks' inputs (matrix units run faster on constant data than on random data).
void FillUniform(const Tensor& t, uint64_t seed);
// The dense bf16 GEMM rate of cuBLAS on this device, measured now (m = n = k = size, best of `reps`),
// in FLOP/s: the peak MFU is taken against on CUDA.
double MeasureBf16GemmFlops(int64_t size = 8192, int reps = 10);

}  // namespace moe::kernels::cuda
