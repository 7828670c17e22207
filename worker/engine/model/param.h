// Trainable parameters with their gradients and AdamW moments.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace moe::model {

struct Param {
  std::string name;  // unique, stable across runs and layouts (checkpoints key on it)
  Tensor value;      // master weights (fp32; f64 in gradient checks); undefined where the Optimizer
                     // keeps only this rank's shard of them (ZeRO with bf16 compute copies)
  Tensor compute;    // what the forward and backward read: `value` itself, or its bf16 copy in bf16
                     // training (refreshed by ParamSet::SyncCompute after every update)
  Tensor grad;       // same shape and dtype as value, accumulated over micro-batches
  // Deterministic training (training.deterministic): the f64 accumulator every backward
  // contribution is added to (GradSink); the Optimizer reduces it and rounds it into `grad`.
  // Undefined otherwise.
  Tensor accum;
  Tensor m,
      v;  // AdamW moments (views the Optimizer sets; undefined under ZeRO, whose shards it holds)
  bool weight_decay = true;  // false for norms
  // Routed-expert weights: dim 0 is this rank's experts, global ids [expert_begin,
  // expert_begin+dim0). Their gradients are averaged over the ranks that hold the same experts, not
  // over all ranks.
  bool expert = false;
  int64_t expert_begin = 0;
  // The first element of the global tensor that this rank's tensor holds (0 unless an expert
  // share).
  int64_t global_begin() const { return expert ? expert_begin * (grad.numel() / grad.dim(0)) : 0; }
  // A copy of a parameter that another pipeline stage owns (the embedding MTP reads on the last
  // stage): its gradient is summed with the owner's over the embedding group; checkpoints and the
  // gradient norm count the owner's only.
  bool tied_copy = false;
  // The weight of a linear layer that trains in FP8 (--precision fp8): its GEMMs take e4m3 inputs
  // in DeepSeek-V3's tiles (worker/engine/model/layers.h Linear). Only ParamSet::Fp8Gemm sets it.
  bool fp8 = false;
};

// Where a backward pass puts one contribution to a parameter's gradient (one GEMM over one
// micro-batch's tokens, one norm's or embedding's rows):
//   plain (no accumulator): `grad` itself, which the kernel accumulates into (GEMM beta 1);
//   deterministic: a zeroed scratch of grad's shape and dtype (made on the first tensor() call),
//   added to the f64 accumulator by Commit; a GEMM (AddGemm) adds its product to the accumulator
//   in its own epilogue instead (kernels::GemmAccumulate: no scratch, no extra pass), and an
//   embedding adds its used rows' sums (kernels::EmbeddingBackwardAccumulate).
// Kernels accumulate into tensor() in both cases.
// Each contribution is then computed and rounded the same way whatever the layout, and an f64 sum
// of fp32 values is exact while their exponents lie within 2^29 of each other: the gradient no
// longer depends on the order in which micro-batches, data-parallel ranks, expert-parallel sources
// and pipeline stages add their parts, so every layout of a job trains bitwise like W = 1.
class GradSink {
 public:
  // The whole parameter, or rows [first, first + count) of its dim 0 (one expert of an expert
  // tensor).
  explicit GradSink(const Param& p, int64_t first = 0, int64_t count = -1);
  const Tensor& tensor();
  // The contribution op(a) @ op(b), of the gradient's shape with its leading dimensions folded into
  // rows: Gemm with beta 1 into the gradient, or the product added to the f64 accumulator (Commit
  // has nothing more to do for it).
  void AddGemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b);
  // An embedding table's contribution from dout's rows (kernels::EmbeddingBackward): into the
  // gradient, or each used row's fp32 sum added to the f64 accumulator (only those rows touched).
  void AddEmbedding(const Tensor& dout, const Tensor& ids);
  void Commit();

 private:
  Tensor grad_, accum_, scratch_;
};

// accum (f64) += src (f32, bf16 or f64; same numel and device), converting in bounded chunks.
void AddToAccumulator(const Tensor& accum, const Tensor& src);

class ParamSet {
 public:
  // Master weights, gradients and moments in `dtype`; the layers compute in `compute_dtype` (bf16
  // with fp32 master weights is mixed-precision training; by default the same as `dtype`).
  // AdamW's moments are `moments_dtype` (default: dtype; bf16 keeps them as DeepSeek-V3 does).
  // fp8_gemms: the linear layers' weights that Fp8Gemm marks train in FP8.
  ParamSet(DType dtype, Device device, std::optional<DType> compute_dtype = std::nullopt,
           std::optional<DType> moments_dtype = std::nullopt, bool fp8_gemms = false)
      : dtype_(dtype),
        compute_dtype_(compute_dtype.value_or(dtype)),
        moments_dtype_(moments_dtype.value_or(dtype)),
        device_(device),
        fp8_gemms_(fp8_gemms) {}

  // Creates a parameter initialised from N(0, std^2) (std == 0: constant `fill`), with a stream
  // that depends only on (seed, name) and, for expert tensors, on the global expert id: the same
  // expert starts from the same weights whatever the parallel layout.
  Param* Add(const std::string& name, const Tensor::Shape& shape, uint64_t seed, double std,
             double fill = 0.0, bool weight_decay = true, bool expert = false,
             int64_t expert_begin = 0);

  // `p` (a linear layer's weight: attention projections, dense and expert FFNs, MTP's projection)
  // trains in FP8 when this set does; the embedding, head, router and norms never do (DeepSeek-V3's
  // recipe).
  Param* Fp8Gemm(Param* p) const {
    p->fp8 = fp8_gemms_;
    return p;
  }
  bool fp8_gemms() const { return fp8_gemms_; }

  const std::vector<std::unique_ptr<Param>>& all() const { return params_; }
  Param* Find(const std::string& name) const;
  void ZeroGrads() const;
  // Refreshes every compute copy from its master weights (after an update or a restore); a no-op
  // when they are the same tensor.
  void SyncCompute() const;
  DType dtype() const { return dtype_; }
  DType compute_dtype() const { return compute_dtype_; }
  DType moments_dtype() const { return moments_dtype_; }
  int64_t NumElements(bool experts_only = false) const;

 private:
  DType dtype_;
  DType compute_dtype_;
  DType moments_dtype_;
  Device device_;
  bool fp8_gemms_ = false;
  std::vector<std::unique_ptr<Param>> params_;
};

}  // namespace moe::model
