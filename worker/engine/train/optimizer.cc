#include "worker/engine/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/memory_stats.h"
#include "kernels/optimizer.h"

namespace moe::train {

double LearningRate(const OptimizerConfig& o, int64_t decay_steps, int64_t step) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps) {
    return o.lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  }
  if (step >= decay_steps || decay_steps <= o.warmup_steps)
    return step >= decay_steps ? o.min_lr : o.lr;
  const double progress = static_cast<double>(step - o.warmup_steps) /
                          static_cast<double>(decay_steps - o.warmup_steps);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * progress));
}

// A range of a bucket reduced on its own (SetOverlap): whole parameters, the padding with the last.
struct Optimizer::Span {
  int64_t begin = 0, end = 0;
  int params = 0;        // how many parameters it holds
  int left = 0;          // of those, how many the backward has not reported final this step
  parallel::Pending op;  // its reduction, once started (this step)
};

struct Optimizer::Bucket {
  bool experts = false;
  parallel::Communicator* group = nullptr;  // null: a group of one
  int size = 1, rank = 0;
  std::vector<model::Param*> params;
  std::vector<int64_t> offsets;  // each parameter's first element in the flat buffers
  int64_t numel = 0;             // padded to a multiple of size under ZeRO
  std::vector<int64_t> counts;   // the shards' sizes (size entries)
  int64_t shard_begin = 0, shard_end = 0;
  Tensor compute;  // [numel] what the layers read
  Tensor master;   // [numel] (== compute when the dtypes agree) or [shard] (sharded master)
  int64_t master_offset = 0;  // the flat index of master's first element
  Tensor grad;                // [numel]
  Tensor accum;               // [numel] f64 (deterministic training), or undefined
  Tensor m, v;                // [shard]
  std::vector<Span> spans;    // with overlap: from the end of the buffer to its start
  std::unique_ptr<kernels::AdamWPlan> plan;  // AdamW's segments of the shard (first update)

  // Element range [a, e) of parameter i inside this rank's shard (a == e: none).
  std::pair<int64_t, int64_t> InShard(size_t i) const {
    const int64_t off = offsets[i], n = params[i]->grad.numel();
    return {std::max(off, shard_begin), std::min(off + n, shard_end)};
  }
};

namespace {

Tensor Flat(const Tensor& buffer, int64_t begin, int64_t end) { return buffer.Rows(begin, end); }

// A parameter's global shape (an expert tensor's first dimension counts every expert).
std::vector<int64_t> GlobalShape(const model::Param& p, int64_t num_experts_total) {
  std::vector<int64_t> shape = p.grad.shape();
  if (p.expert) shape[0] = num_experts_total;
  return shape;
}

}  // namespace

Optimizer::Optimizer(const OptimizerConfig& cfg, model::ParamSet& params,
                     const parallel::ParallelContext& par, bool distributed, int64_t num_experts,
                     bool deterministic)
    : cfg_(cfg),
      params_(params),
      distributed_(distributed),
      num_experts_(num_experts),
      deterministic_(deterministic) {
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

bool Optimizer::sharded_master() const {
  return distributed_ && params_.compute_dtype() != params_.dtype();
}

void Optimizer::Build(Bucket& b) {
  int64_t n = 0;
  for (model::Param* p : b.params) {
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
    model::Param* p = b.params[i];
    const Tensor::Shape shape = p->grad.shape();
    const int64_t off = b.offsets[i], len = p->grad.numel();
    const Tensor value = p->value.Reshape({len});
    kernels::Convert(value, Flat(b.compute, off, off + len));
    const auto [a, e] = b.InShard(i);
    if (a < e)
      Flat(b.master, a - b.master_offset, e - b.master_offset)
          .CopyFrom(value.Rows(a - off, e - off));
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
    for (Span& s : b->spans) {
      s.left = s.params;
      s.op.reset();
    }
  }
}

void Optimizer::SetOverlap(int64_t span_bytes) {
  span_of_.clear();
  for (auto& b : buckets_) {
    b->spans.clear();
    if (span_bytes <= 0 || b->size == 1) continue;
    const Tensor& sums = b->accum.defined() ? b->accum : b->grad;
    const int64_t min_elems =
        std::max<int64_t>(1, span_bytes / static_cast<int64_t>(DTypeSize(sums.dtype())));
    Span span;
    span.end = b->numel;  // the padding goes with the last parameter
    for (size_t i = b->params.size(); i-- > 0;) {
      span_of_[b->params[i]] = {b.get(), b->spans.size()};
      ++span.params;
      span.begin = b->offsets[i];
      if (span.end - span.begin >= min_elems || i == 0) {
        span.left = span.params;
        b->spans.push_back(std::move(span));
        span = Span();
        span.end = b->offsets[i];
      }
    }
  }
}

int64_t Optimizer::overlap_spans() const {
  int64_t n = 0;
  for (const auto& b : buckets_) n += static_cast<int64_t>(b->spans.size());
  return n;
}

void Optimizer::StartSpan(Bucket& b, Span& span) {
  const Tensor sums = Flat(b.accum.defined() ? b.accum : b.grad, span.begin, span.end);
  if (!distributed_) {
    span.op = b.group->StartAllReduceSum(sums);
    return;
  }
  // Each rank's share of the span: its shard's overlap with it.
  std::vector<int64_t> counts(static_cast<size_t>(b.size));
  const int64_t shard = b.shard_end - b.shard_begin;
  for (int r = 0; r < b.size; ++r) {
    const int64_t lo = std::max(span.begin, shard * r), hi = std::min(span.end, shard * (r + 1));
    counts[static_cast<size_t>(r)] = std::max<int64_t>(0, hi - lo);
  }
  span.op = b.group->StartReduceScatterSum(sums, counts);
}

void Optimizer::GradsFinal(const std::vector<model::Param*>& params) {
  for (const model::Param* p : params) {
    auto it = span_of_.find(p);
    if (it == span_of_.end()) continue;  // its bucket's group is a group of one, or no overlap
    Bucket& b = *it->second.first;
    Span& span = b.spans[it->second.second];
    MOE_CHECK(span.left > 0 && !span.op) << p->name << " reported final twice in a step";
    if (--span.left == 0) StartSpan(b, span);
  }
}

Status Optimizer::ReduceGradients() {
  for (auto& b :
       buckets_) {  // the spans the backward did not finish, in the same order on every rank
    for (Span& span : b->spans) {
      if (!span.op) StartSpan(*b, span);
    }
  }
  Status first;
  for (auto& b : buckets_) {
    for (Span& span : b->spans) {
      if (Status st = span.op->Wait(); !st.ok() && first.ok()) first = st;
      span.op.reset();
    }
  }
  MOE_RETURN_IF_ERROR(first);
  for (auto& b : buckets_) {
    const Tensor& sums = b->accum.defined() ? b->accum : b->grad;
    if (b->size > 1 && b->spans.empty() && distributed_) {
      MOE_RETURN_IF_ERROR(b->group->ReduceScatterSum(sums, b->counts));
    } else if (b->size > 1 && b->spans.empty()) {
      MOE_RETURN_IF_ERROR(b->group->AllReduceSum(sums));
    }
    if (b->accum.defined())
      kernels::Convert(Flat(b->accum, b->shard_begin, b->shard_end),
                       Flat(b->grad, b->shard_begin, b->shard_end));
  }
  return OkStatus();
}

// Each owned shard's sum of squares, added on the device in the order of the buckets.
void Optimizer::OwnedGradSquaresInto(bool experts, const Tensor& acc, int64_t slot) const {
  for (const auto& b : buckets_) {
    if (b->experts != experts || (!distributed_ && b->rank != 0)) continue;
    for (size_t i = 0; i < b->params.size(); ++i) {
      const auto [a, e] = b->InShard(i);
      if (a < e && !b->params[i]->tied_copy)
        kernels::SumSquaresInto(Flat(b->grad, a, e), acc, slot);
    }
  }
}

// AdamW over this rank's shard of the bucket, every parameter in one pass (one launch on CUDA),
// with the compute copy (bf16 under mixed precision) written from the new master in the same pass.
void Optimizer::UpdateBucket(Bucket& b, const void* adamw_config) {
  kernels::AdamWConfig a = *static_cast<const kernels::AdamWConfig*>(adamw_config);
  a.weight_decay = cfg_.weight_decay;
  if (!b.plan) {  // the bucket's layout is fixed once built: the plan is made once
    std::vector<kernels::AdamWSegment> segments;
    for (size_t i = 0; i < b.params.size(); ++i) {
      const auto [lo, hi] = b.InShard(i);
      if (lo < hi) segments.push_back({lo, hi, b.params[i]->weight_decay});
    }
    b.plan = std::make_unique<kernels::AdamWPlan>(
        kernels::MakeAdamWPlan(std::move(segments), b.master.device()));
  }
  kernels::AdamWBuffers buf;
  buf.master = b.master;
  buf.master_offset = b.master_offset;
  buf.grad = b.grad;
  buf.m = b.m;
  buf.v = b.v;
  buf.moments_offset = b.shard_begin;
  if (b.master.raw() != b.compute.raw()) buf.compute = b.compute;
  kernels::AdamWMulti(*b.plan, buf, a);
}

Status Optimizer::StepWithDeviceNorm(int64_t step, double lr, const Tensor& norm_sq,
                                     bool norm_fp32) {
  MOE_CHECK(norm_sq.dtype() == DType::kF64 && norm_sq.numel() == 3)
      << "StepWithDeviceNorm: norm_sq " << norm_sq.ShapeString();
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
    UpdateBucket(*b, &a);  // the compute copy too
    if (distributed_ && b->size > 1)
      MOE_RETURN_IF_ERROR(b->group->AllGather(b->compute, b->counts));
  }
  return OkStatus();
}

void Optimizer::WeightsChanged() {
  for (auto& b : buckets_) {
    // A sharded master and the compute copies were read separately (Pieces), nothing to refresh.
    if (b->master.raw() != b->compute.raw() && b->master.numel() == b->numel)
      kernels::Convert(b->master, b->compute);
  }
}

void Optimizer::Pieces(bool writer, std::vector<checkpoint::TensorPiece>* out) const {
  for (const auto& b : buckets_) {
    if (!distributed_ && writer && b->rank != 0)
      continue;  // full tensors: the group's rank 0 writes them
    for (size_t i = 0; i < b->params.size(); ++i) {
      model::Param* p = b->params[i];
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
        out->push_back({prefix + "value", global, g0,
                        (sharded_master() ? p->compute : p->value).Reshape({len})});
      } else if (!sharded_master() && b->rank == 0) {
        out->push_back({prefix + "value", global, g0, p->value.Reshape({len})});
      }
      const auto [a, e] = b->InShard(i);
      if (a >= e) continue;
      const int64_t at = g0 + (a - off);
      if (sharded_master())
        out->push_back({prefix + "value", global, at,
                        Flat(b->master, a - b->master_offset, e - b->master_offset)});
      out->push_back(
          {prefix + "m", global, at, Flat(b->m, a - b->shard_begin, e - b->shard_begin)});
      out->push_back(
          {prefix + "v", global, at, Flat(b->v, a - b->shard_begin, e - b->shard_begin)});
    }
  }
}

OptimizerBytes Optimizer::Bytes() const {
  OptimizerBytes out;
  for (const auto& b : buckets_) {
    out.weights += static_cast<int64_t>(b->compute.nbytes());
    if (b->master.raw() != b->compute.raw())
      out.weights += static_cast<int64_t>(b->master.nbytes());
    out.gradients +=
        static_cast<int64_t>(b->grad.nbytes() + (b->accum.defined() ? b->accum.nbytes() : 0));
    out.optimizer += static_cast<int64_t>(b->m.nbytes() + b->v.nbytes());
  }
  return out;
}

}  // namespace moe::train
