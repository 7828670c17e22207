// Trainable parameters with their gradients and AdamW moments.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace moe {

struct Param {
  std::string name;   // unique, stable across runs and layouts (checkpoints key on it)
  Tensor value;       // master weights (fp32; f64 in gradient checks)
  Tensor grad;        // same shape, accumulated over micro-batches
  Tensor m, v;        // AdamW moments
  bool weight_decay = true;  // false for norms
  // Routed-expert weights: dim 0 is this rank's experts, global ids [expert_begin, expert_begin+dim0).
  // Their gradients are averaged over the ranks that hold the same experts, not over all ranks.
  bool expert = false;
  int64_t expert_begin = 0;
};

class ParamSet {
 public:
  ParamSet(DType dtype, Device device) : dtype_(dtype), device_(device) {}

  // Creates a parameter initialised from N(0, std^2) (std == 0: constant `fill`), with a stream that
  // depends only on (seed, name) and, for expert tensors, on the global expert id: the same expert
  // starts from the same weights whatever the parallel layout.
  Param* Add(const std::string& name, const Tensor::Shape& shape, uint64_t seed, double std, double fill = 0.0,
             bool weight_decay = true, bool expert = false, int64_t expert_begin = 0);

  const std::vector<std::unique_ptr<Param>>& all() const { return params_; }
  Param* Find(const std::string& name) const;
  void ZeroGrads() const;
  int64_t NumElements(bool experts_only = false) const;

 private:
  DType dtype_;
  Device device_;
  std::vector<std::unique_ptr<Param>> params_;
};

}  // namespace moe
