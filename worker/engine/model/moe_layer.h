// The DeepSeek-V3 MoE layer: router with biased, group-limited top-k selection; dropless dispatch
// to routed experts (grouped SwiGLU GEMMs) through the TokenDispatcher; weighted combine; shared
// experts; the sequence-wise balance loss.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/router.h"
#include "kernels/tensor.h"
#include "worker/engine/model/param.h"
#include "worker/engine/model/saved.h"
#include "worker/engine/parallel/dispatcher.h"

namespace moe::model {

class SwigluFfn;

// What a MoE layer reports per micro-batch.
// Where a loss goes on the device instead of to the host: acc[slot] += it (acc f64 on the model's
// device). The trainer reads its accumulator once at the end of the step (docs/architecture.md,
// "Host syncs"); undefined acc: the loss comes back as a host value.
struct LossSink {
  Tensor acc;
  int64_t slot = 0;
  bool set() const { return acc.defined(); }
};

struct MoeStats {
  LossSink aux_sink;               // in: where the balance loss goes (unset: into aux_loss)
  bool want_aux = true;            // in: false for a recompute's forward (counted already)
  bool recompute_follows = false;  // in: the block runs this forward again before its backward
  std::vector<int64_t> tokens_per_expert;  // [E] on this rank, this micro-batch
  double aux_loss = 0;                     // this rank's share of the sequence-wise balance loss
  Tensor routing;  // i32 [T, k]: each token's experts, best first (for checks)
};

// DeepSeek-V3 MoE: router with biased, group-limited top-k selection; dropless dispatch to routed
// experts (grouped SwiGLU GEMMs) through the TokenDispatcher; weighted combine; shared experts; the
// sequence-wise balance loss. The per-expert bias steers selection only and is updated outside
// (aux-loss-free balancing), never by gradients.
class MoeLayer {
 public:
  MoeLayer(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed,
           double out_std, parallel::TokenDispatcher* dispatcher, DType dtype,
           Device device,                // dtype: the routing's (fp32 or f64)
           bool recompute_act = false);  // recompute the experts' SwiGLU activation in the backward
  ~MoeLayer();
  // aux_coeff: alpha / (sequences in the global batch), so the summed loss is the global mean.
  StatusOr<Tensor> Forward(const Tensor& x, int64_t batch, int64_t seq_len, double aux_coeff,
                           MoeStats* stats);
  StatusOr<Tensor> Backward(const Tensor& dy);

  const std::string& name() const { return name_; }  // its parameters' prefix, e.g. "layers.3.moe"
  const Tensor& bias() const { return bias_; }       // [E], selection bias (host-updated)
  // b_i += rate * sign(mean(c) - c_i) from the step's global token counts.
  void UpdateBias(const std::vector<double>& global_counts, double rate);
  void SetBias(const std::vector<float>& values);

 private:
  const std::string name_;
  const MoeConfig cfg_;
  kernels::RouterConfig router_cfg_;
  int64_t hidden_;
  parallel::TokenDispatcher* dispatcher_;
  Param* router_;  // [E, h]
  Param* w13_;     // [E_local, 2F, h]
  Param* w2_;      // [E_local, h, F]
  // What the backward of one micro-batch needs. Routing runs in fp32 (scores, topk_w); topk_w_c is
  // the weights in the activations' dtype.
  struct Saved {
    int64_t batch = 0, seq = 0;
    double aux_coeff = 0;
    Tensor x, scores, topk_idx, topk_w, topk_w_c, row_of_slot, x_local, gate_up, act, yp;
    parallel::TokenDispatcher::Route route;
  };
  // force_balanced_routing's seed for this forward (moe_layer.cc).
  uint64_t ForcedSeed(const MoeStats& stats);
  StatusOr<Tensor> ExpertsBackward(Saved& s, const Tensor& dy_local);
  Tensor RouterBackward(const Saved& s, const Tensor& dw);

  std::unique_ptr<SwigluFfn> shared_;
  Tensor bias_;
  bool recompute_act_;
  // force_balanced_routing: this layer's draws so far (the seeds start from a hash of its name, so
  // layers draw apart), and the seeds of the forwards whose recompute has not run yet (a recompute
  // routes as its first forward did: the backward follows the same routing).
  uint64_t forced_draws_ = 0, forced_salt_ = 0;
  std::deque<uint64_t> forced_pending_;
  SavedQueue<Saved> saved_;
};

}  // namespace moe::model
