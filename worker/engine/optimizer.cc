#include "worker/engine/optimizer.h"

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/memory_stats.h"
#include "kernels/optimizer.h"

namespace moe {

double LearningRate(const OptimizerConfig& o, int64_t decay_steps, int64_t step) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps) {
    return o.lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  }
  if (step >= decay_steps || decay_steps <= o.warmup_steps) return step >= decay_steps ? o.min_lr : o.lr;
  const double progress = static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps - o.warmup_steps);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * progress));
}

struct Optimizer::Bucket {
  bool experts = false;
  Communicator* group = nullptr;  // null: a group of one
  int size = 1, rank = 0;
  std::vector<Param*> params;
  std::vector<int64_t> offsets;   // each parameter's first element in the flat buffers
  int64_t numel = 0;              // padded to a multiple of size under ZeRO
  std::vector<int64_t> counts;    // the shards' sizes (size entries)
  int64_t shard_begin = 0, shard_end = 0;
  Tensor compute;                 // [numel] what the layers read
  Tensor master;                  // [numel] (== compute when the dtypes agree) or [shard] (sharded master)
  int64_t master_offset = 0;      // the flat index of master's first element
  Tensor grad;                    // [numel]
  Tensor accum;                   // [numel] f64 (deterministic training), or undefined
  Tensor m, v;                    // [shard]

  // Element range [a, e) of parameter i inside this rank's shard (a == e: none).
  std::pair<int64_t, int64_t> InShard(size_t i) const {
    const int64_t off = offsets[i], n = params[i]->grad.numel();
    return {std::max(off, shard_begin), std::min(off + n, shard_end)};
  }
};

namespace {

Tensor Flat(const Tensor& buffer, int64_t begin, int64_t end) { return buffer.Rows(begin, end); }

// A parameter's global shape (an expert tensor's first dimension counts every expert).
std::vector<int64_t> GlobalShape(const Param& p, int64_t num_experts_total) {
  std::vector<int64_t> shape = p.grad.shape();
  if (p.expert) shape[0] = num_experts_total;
  return shape;
}

}  // namespace

Optimizer::Optimizer(const OptimizerConfig& cfg, ParamSet& params, const ParallelContext& par, bool distributed,
                     int64_t num_experts, bool deterministic)
    : cfg_(cfg), params_(params), distributed_(distributed), num_experts_(num_experts), deterministic_(deterministic) {
  for (bool experts : {false, true}) {
    auto b = std::make_unique<Bucket>();
    b->experts = experts;
    b->group = experts ? par.expert_dp : par.dp_group;
    if (b->group != nullptr) {
      b->size = b->group->size();
      b->rank = b->group->rank();
    }
    for (const auto& p : params.all()) {
      if (p->expert == experts) b->params.push_back(p.get());
    }
    if (b->params.empty()) continue;
    Build(*b);
    buckets_.push_back(std::move(b));
  }
}

Optimizer::~Optimizer() = default;

bool Optimizer::sharded_master() const { return distributed_ && params_.compute_dtype() != params_.dtype(); }

void Optimizer::Build(Bucket& b) {
  int64_t n = 0;
  for (Param* p : b.params) {
    b.offsets.push_back(n);
    n += p->grad.numel();
  }
  const int64_t g = distributed_ ? b.size : 1;
  b.numel = (n + g - 1) / g * g;
  const int64_t shard = b.numel / g;
  b.counts.assign(static_cast<size_t>(b.size), distributed_ ? shard : 0);
  b.shard_begin = distributed_ ? shard * b.rank : 0;
  b.shard_end = b.shard_begin + shard;
  const Device dev = b.params[0]->grad.device();
  const DType dt = params_.dtype(), cdt = params_.compute_dtype();
  {
    MemoryScope gradients(MemoryCategory::kGradients);
    b.grad = Tensor::Zeros({b.numel}, dt, dev);
    if (deterministic_) b.accum = Tensor::Zeros({b.numel}, DType::kF64, dev);
  }
  {
    MemoryScope weights(MemoryCategory::kWeights);
    b.compute = Tensor::Zeros({b.numel}, cdt, dev);
    if (cdt == dt) {
      b.master = b.compute;
    } else if (!distributed_) {
      b.master = Tensor::Zeros({b.numel}, dt, dev);
    } else {
      b.master = Tensor::Zeros({b.shard_end - b.shard_begin}, dt, dev);
      b.master_offset = b.shard_begin;
    }
  }
  MemoryScope optimizer(MemoryCategory::kOptimizer);
  b.m = Tensor::Zeros({b.shard_end - b.shard_begin}, params_.moments_dtype(), dev);
  b.v = Tensor::Zeros({b.shard_end - b.shard_begin}, params_.moments_dtype(), dev);
  for (size_t i = 0; i < b.params.size(); ++i) {
    Param* p = b.params[i];
    const Tensor::Shape shape = p->grad.shape();
    const int64_t off = b.offsets[i], len = p->grad.numel();
    const Tensor value = p->value.Reshape({len});
    kernels::Convert(value, Flat(b.compute, off, off + len));
    const auto [a, e] = b.InShard(i);
    if (a < e) Flat(b.master, a - b.master_offset, e - b.master_offset).CopyFrom(value.Rows(a - off, e - off));
    if (b.master_offset == 0 && b.master.numel() == b.numel) {
      Flat(b.master, off, off + len).CopyFrom(value);
      p->value = Flat(b.master, off, off + len).Reshape(shape);
    } else {
      p->value = Tensor();  // only this rank's shard of the master exists (Pieces, WeightsChanged)
    }
    p->compute = Flat(b.compute, off, off + len).Reshape(shape);
    p->grad = Flat(b.grad, off, off + len).Reshape(shape);
    if (b.accum.defined()) p->accum = Flat(b.accum, off, off + len).Reshape(shape);
    if (!distributed_) {
      p->m = Flat(b.m, off, off + len).Reshape(shape);
      p->v = Flat(b.v, off, off + len).Reshape(shape);
    } else {
      p->m = p->v = Tensor();
    }
  }
}

void Optimizer::ZeroGrads() {
  for (auto& b : buckets_) {
    b->grad.SetZero();
    if (b->accum.defined()) b->accum.SetZero();
  }
}

Status Optimizer::ReduceGradients() {
  for (auto& b : buckets_) {
    const Tensor& sums = b->accum.defined() ? b->accum : b->grad;
    if (b->size > 1 && distributed_) {
      MOE_RETURN_IF_ERROR(b->group->ReduceScatterSum(sums, b->counts));
    } else if (b->size > 1) {
      MOE_RETURN_IF_ERROR(b->group->AllReduceSum(sums));
    }
    if (b->accum.defined()) kernels::Convert(Flat(b->accum, b->shard_begin, b->shard_end), Flat(b->grad, b->shard_begin, b->shard_end));
  }
  return OkStatus();
}

// Each owned shard's sum of squares, added on the device in the order of the buckets.
void Optimizer::OwnedGradSquaresInto(bool experts, const Tensor& acc, int64_t slot) const {
  for (const auto& b : buckets_) {
    if (b->experts != experts || (!distributed_ && b->rank != 0)) continue;
    for (size_t i = 0; i < b->params.size(); ++i) {
      const auto [a, e] = b->InShard(i);
      if (a < e && !b->params[i]->tied_copy) kernels::SumSquaresInto(Flat(b->grad, a, e), acc, slot);
    }
  }
}

void Optimizer::UpdateBucket(Bucket& b, const void* adamw_config) {
  kernels::AdamWConfig a = *static_cast<const kernels::AdamWConfig*>(adamw_config);
  for (size_t i = 0; i < b.params.size(); ++i) {
    const auto [lo, hi] = b.InShard(i);
    if (lo >= hi) continue;
    a.weight_decay = b.params[i]->weight_decay ? cfg_.weight_decay : 0.0;
    kernels::AdamW(Flat(b.master, lo - b.master_offset, hi - b.master_offset), Flat(b.grad, lo, hi),
                   Flat(b.m, lo - b.shard_begin, hi - b.shard_begin), Flat(b.v, lo - b.shard_begin, hi - b.shard_begin), a);
  }
}

Status Optimizer::StepWithDeviceNorm(int64_t step, double lr, const Tensor& norm_sq, bool norm_fp32) {
  MOE_CHECK(norm_sq.dtype() == DType::kF64 && norm_sq.numel() == 3) << "StepWithDeviceNorm: norm_sq " << norm_sq.ShapeString();
  kernels::AdamWConfig a;
  a.lr = lr;
  a.beta1 = cfg_.beta1;
  a.beta2 = cfg_.beta2;
  a.eps = cfg_.eps;
  a.step = step;
  a.norm_sq = static_cast<const double*>(norm_sq.raw());
  a.grad_clip = cfg_.grad_clip;
  a.norm_fp32 = norm_fp32;
  for (auto& b : buckets_) {
    UpdateBucket(*b, &a);
    if (b->master.raw() != b->compute.raw()) {
      kernels::Convert(b->master, Flat(b->compute, b->master_offset, b->master_offset + b->master.numel()));
    }
    if (distributed_ && b->size > 1) MOE_RETURN_IF_ERROR(b->group->AllGather(b->compute, b->counts));
  }
  return OkStatus();
}

void Optimizer::WeightsChanged() {
  for (auto& b : buckets_) {
    // A sharded master and the compute copies were read separately (Pieces), nothing to refresh.
    if (b->master.raw() != b->compute.raw() && b->master.numel() == b->numel) kernels::Convert(b->master, b->compute);
  }
}

void Optimizer::Pieces(bool writer, std::vector<TensorPiece>* out) const {
  for (const auto& b : buckets_) {
    if (!distributed_ && writer && b->rank != 0) continue;  // full tensors: the group's rank 0 writes them
    for (size_t i = 0; i < b->params.size(); ++i) {
      Param* p = b->params[i];
      if (writer && p->tied_copy) continue;  // the first stage writes the embedding
      const std::vector<int64_t> global = GlobalShape(*p, num_experts_);
      const int64_t g0 = p->global_begin(), off = b->offsets[i], len = p->grad.numel();
      const std::string prefix = "param/" + p->name + "/";
      if (!distributed_) {
        out->push_back({prefix + "value", global, g0, p->value.Reshape({len})});
        out->push_back({prefix + "m", global, g0, p->m.Reshape({len})});
        out->push_back({prefix + "v", global, g0, p->v.Reshape({len})});
        continue;
      }
      if (!writer) {  // the whole weights: into the compute copies when the master is a shard
        out->push_back({prefix + "value", global, g0, (sharded_master() ? p->compute : p->value).Reshape({len})});
      } else if (!sharded_master() && b->rank == 0) {
        out->push_back({prefix + "value", global, g0, p->value.Reshape({len})});
      }
      const auto [a, e] = b->InShard(i);
      if (a >= e) continue;
      const int64_t at = g0 + (a - off);
      if (sharded_master()) out->push_back({prefix + "value", global, at, Flat(b->master, a - b->master_offset, e - b->master_offset)});
      out->push_back({prefix + "m", global, at, Flat(b->m, a - b->shard_begin, e - b->shard_begin)});
      out->push_back({prefix + "v", global, at, Flat(b->v, a - b->shard_begin, e - b->shard_begin)});
    }
  }
}

OptimizerBytes Optimizer::Bytes() const {
  OptimizerBytes out;
  for (const auto& b : buckets_) {
    out.weights += static_cast<int64_t>(b->compute.nbytes());
    if (b->master.raw() != b->compute.raw()) out.weights += static_cast<int64_t>(b->master.nbytes());
    out.gradients += static_cast<int64_t>(b->grad.nbytes() + (b->accum.defined() ? b->accum.nbytes() : 0));
    out.optimizer += static_cast<int64_t>(b->m.nbytes() + b->v.nbytes());
  }
  return out;
}

}  // namespace moe
