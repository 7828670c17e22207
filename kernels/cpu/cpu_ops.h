// The CPU backend's entry points: what the device dispatch (kernels/<family>.cc) calls for host
// tensors, one block per family, each defined in kernels/cpu/<family>.cc. Shapes are the public
// header's (kernels/<family>.h); the callers checked them.
//
// Dtypes: f32 for training, f64 for gradient checks; bf16 tensors run the f32 kernel on f32 copies and
// round the outputs back to bf16 (cpu::Bf16Scope, kernels/cpu/common.h): the arithmetic of the CUDA
// bf16 kernels, so this path is their reference. Reductions use fixed chunking: results depend only
// on the thread count.
//
// Named cpu_ops.h (and its CUDA twin cuda/cuda_ops.h) rather than a bare ops.h: the file name alone, in
// an include line, an editor tab or a compiler message, says which backend it declares.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/optimizer.h"
#include "kernels/rope.h"
#include "kernels/router.h"
#include "kernels/tensor.h"

namespace moe::kernels::cpu {

// gemm.cc: OpenBLAS where linked, else the built-in blocked GEMM (the raw-pointer cpu::Gemm and
// cpu::BlockedGemm templates are public, in kernels/gemm.h).
void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta);
void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& y);
void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& dx);
void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, const Tensor& dw);

// fp8.cc: fp8::Quantize then fp8::Dequantize per tile; x 2-D [rows, cols], `groups` the row offsets
// the tiles restart at (0 first, rows last).
void Fp8QuantDequant(const Tensor& x, int64_t tile_rows, int64_t tile_cols, const Tensor& out,
                     const std::vector<int64_t>& groups, bool mxfp8);

// embedding.cc: the backward is a counting sort by id, each vocabulary row summed in token order.
void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out);
void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable);

// rmsnorm.cc: dw summed over fixed blocks of rows.
void RmsNormForward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd);
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                     const Tensor& dw);

// rope.cc
void RopeForward(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset, const Tensor& inv_freq, RopeLayout layout);
void RopeBackward(const Tensor& dx, int64_t seq_len, int64_t heads, int64_t offset, const Tensor& inv_freq, RopeLayout layout);

// attention.cc: tiled (flash-style), one (sequence, head) per thread, only each row's log-sum-exp kept.
void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq_len, int64_t heads,
                      double scale, const Tensor& out, const Tensor& lse);
void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                       const Tensor& lse, int64_t batch, int64_t seq_len, int64_t heads, double scale,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv);

// attention_materialized.cc: the textbook path, [S, S] probabilities kept (a reference; no CUDA twin).
void MaterializedAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq_len,
                                  int64_t heads, double scale, const Tensor& out, const Tensor& probs);
void MaterializedAttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                                   const Tensor& dout, int64_t batch, int64_t seq_len, int64_t heads, double scale,
                                   const Tensor& dq, const Tensor& dk, const Tensor& dv);

// swiglu.cc
void SwigluForward(const Tensor& gate_up, const Tensor& out);
void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up);

// cross_entropy.cc
double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale, const Tensor& dlogits);

// router.cc
void RouterForward(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg, const Tensor& scores,
                   const Tensor& topk_idx, const Tensor& topk_w);
void RouterBackward(const Tensor& scores, const Tensor& topk_idx, const Tensor& dtopk_w, const Tensor& dscores_extra,
                    const RouterConfig& cfg, const Tensor& dlogits);
double SeqAuxLoss(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len, double coeff,
                  const Tensor& dscores);

// permute.cc
void BuildDispatchPlanOnDevice(const Tensor& topk_idx, int64_t num_experts, const Tensor& counts,
                               const Tensor& row_of_slot, const Tensor& token_of_row);
void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx);
void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y);
void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& dyp,
                     const Tensor& dw);

// optimizer.cc: f32 (f64 for gradient checks) master weights, gradients and moments; no bf16.
void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWConfig& cfg);

// elementwise.cc
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

// runtime.cc: the thread count OpenMP and OpenBLAS share, and which GEMM runs.
void SetNumThreads(int threads);
int NumThreads();
std::string GemmBackendName(bool fastest = false);
void SetReproducibleGemm(bool on);
bool ReproducibleGemm();

}  // namespace moe::kernels::cpu
