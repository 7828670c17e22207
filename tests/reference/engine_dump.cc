// Writes the engine's side of a comparison with the independent PyTorch reference
// (tests/reference/compare.py; the contract is in tests/reference/README.md): the model's weights
// in the DeepseekV3 layout, a token batch, and the engine's logits, losses, routing and every
// weight's gradient, in float64 or float32.
//
//   engine_dump --out DIR [--dtype f64|f32] [--train-steps N] [--yarn]
//
// --train-steps N trains the model N steps first (fp32, synthetic data, the real Trainer and
// checkpoint), exports the checkpoint in the DeepseekV3 layout and reloads it (--init-from's path),
// so the comparison covers trained weights and a moved expert bias.
#include <cstdio>
#include <string>
#include <vector>

#include "common/args.h"
#include "common/file_util.h"
#include "common/rng.h"
#include "kernels/elementwise.h"
#include "worker/engine/checkpoint/hf_io.h"
#include "worker/engine/checkpoint/safetensors.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace moe {
namespace {

constexpr int64_t kBatch = 3, kSeq = 24;

// A tiny MLA + MoE + MTP model with groups and the bias: every dimension different, D = 2.
ModelConfig CaseModel(bool yarn) {
  ModelConfig m;
  m.vocab_size = 67;
  m.hidden_size = 32;
  m.num_layers = 3;
  m.num_heads = 4;
  m.first_k_dense = 1;
  m.dense_ffn_hidden = 40;
  m.mtp_depth = 2;
  m.mtp_loss_weight = 0.3;
  m.init_std = 0.15;
  m.attention = AttentionConfig{.type = "mla",
                                .q_lora_rank = 16,
                                .kv_lora_rank = 12,
                                .qk_nope_head_dim = 8,
                                .qk_rope_head_dim = 4,
                                .v_head_dim = 6};
  m.moe = MoeConfig{.num_experts = 8,
                    .top_k = 2,
                    .num_shared_experts = 1,
                    .ffn_hidden = 12,
                    .num_groups = 4,
                    .topk_groups = 2,
                    .score_function = "sigmoid",
                    .route_scale = 2.5,
                    .expert_bias = true,
                    .bias_update_rate = 0.01,
                    .bias_update_schedule = {},
                    .seq_aux_loss_coeff = 0.01};
  if (yarn) {
    m.rope_scaling = RopeScalingConfig{.type = "yarn",
                                       .factor = 4,
                                       .original_max_position_embeddings = 16,
                                       .beta_fast = 32,
                                       .beta_slow = 1,
                                       .mscale = 0.7,
                                       .mscale_all_dim = 0.7};
  }
  return m;
}

model::LossScales ScalesFor(const ModelConfig& m) {
  model::LossScales s;
  s.ce = 1.0 / (kBatch * kSeq);
  s.aux_coeff = m.moe.seq_aux_loss_coeff / kBatch;
  for (int64_t k = 1; k <= m.mtp_depth; ++k)
    s.mtp.push_back(m.mtp_loss_weight / static_cast<double>(m.mtp_depth * kBatch * (kSeq - k)));
  return s;
}

// Trains `m` N steps and writes its checkpoint, exported, to `out` (fp64 values of the fp32
// weights).
Status TrainAndExport(const ModelConfig& m, int64_t steps, const std::string& out) {
  JobSpec spec;
  spec.name = "reference-case";
  spec.model = m;
  spec.data.source = "synthetic";
  spec.data.seq_length = kSeq;
  spec.data.micro_batch_size = kBatch;
  spec.data.global_batch_size = kBatch;
  spec.optimizer.lr = 2e-2;
  spec.optimizer.warmup_steps = 0;
  spec.training.steps = steps;
  spec.training.seed = 99;
  MOE_RETURN_IF_ERROR(ValidateJobSpec(spec));
  const std::string ckpt = out + ".ckpt";
  MOE_RETURN_IF_ERROR(RemoveAll(ckpt));
  parallel::LocalParallel local;
  train::TrainerOptions o;
  o.checkpoint_dir = ckpt;
  o.peak_flops = 1e9;
  o.log_steps = false;
  MOE_RETURN_IF_ERROR(train::Train(spec, local.ctx, o).status());
  checkpoint::HfWriteOptions w;
  w.dtype = "fp64";
  w.mtp_table_copies = false;  // the reference then uses the main tables, as the engine does
  MOE_RETURN_IF_ERROR(checkpoint::ExportCheckpoint(ckpt, out, w));
  return RemoveAll(ckpt);
}

Tensor Tokens(int64_t vocab) {
  Tensor t = Tensor::Empty({kBatch, kSeq + 1}, DType::kI64);
  Rng rng(1234);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int64_t>()[i] = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(vocab)));
  return t;
}

// Inputs (positions 0..S-1) or targets (1..S) of the token batch, as the engine's i32 [B, S].
Tensor Shifted(const Tensor& tokens, int64_t shift) {
  Tensor out = Tensor::Empty({kBatch, kSeq}, DType::kI32);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < kSeq; ++i)
      out.data<int32_t>()[b * kSeq + i] =
          static_cast<int32_t>(tokens.data<int64_t>()[b * (kSeq + 1) + i + shift]);
  return out;
}

Tensor Scalar(double v, DType dt) {
  Tensor t = Tensor::Empty({1}, DType::kF64);
  t.data<double>()[0] = v;
  Tensor out = Tensor::Empty({1}, dt);
  kernels::Convert(t, out);
  return out;
}

Tensor ToI64(const Tensor& i32) {
  Tensor out = Tensor::Empty(i32.shape(), DType::kI64);
  const std::vector<int32_t> v = i32.Clone(Device::Cpu()).ToVector<int32_t>();
  for (size_t i = 0; i < v.size(); ++i) out.data<int64_t>()[i] = v[i];
  return out;
}

Status WriteTensors(const std::string& path,
                    const std::vector<std::pair<std::string, Tensor>>& tensors) {
  checkpoint::SafetensorsWriter w(path);
  for (const auto& [name, t] : tensors)
    w.Plan(name, checkpoint::SafetensorsDType(t.dtype()), t.shape());
  return w.Write({}, [&](const std::string& name, std::string* bytes) {
    for (const auto& [n, t] : tensors) {
      if (n == name) bytes->assign(static_cast<const char*>(t.raw()), t.nbytes());
    }
    return OkStatus();
  });
}

// The engine's outputs: logits, the losses, each MoE layer's routing, every weight's gradient.
Status DumpOutputs(model::Model& model, const Tensor& tokens, const std::string& out, DType dt) {
  const ModelConfig& m = model.config();
  const Tensor inputs = Shifted(tokens, 0), targets = Shifted(tokens, 1);
  const model::LossScales scales = ScalesFor(m);
  model::MicroBatchResult fwd;
  MOE_RETURN_IF_ERROR(model.Loss(inputs, targets, scales, &fwd).status());
  std::vector<std::pair<std::string, Tensor>> t;
  t.emplace_back("logits", model.last_logits().Clone().Reshape({kBatch, kSeq, m.vocab_size}));
  model.params().ZeroGrads();
  MOE_ASSIGN_OR_RETURN(model::MicroBatchResult r, model.ForwardBackward(inputs, targets, scales));
  const double main = r.ce_sum / (kBatch * kSeq);
  double total = main + r.aux_loss, mtp_mean = 0;
  for (size_t k = 0; k < r.mtp_ce_sums.size(); ++k) {
    const double lk =
        r.mtp_ce_sums[k] / static_cast<double>(kBatch * (kSeq - static_cast<int64_t>(k) - 1));
    t.emplace_back("loss.mtp." + std::to_string(k + 1), Scalar(lk, dt));
    mtp_mean += lk / static_cast<double>(r.mtp_ce_sums.size());
  }
  total += m.mtp_loss_weight * mtp_mean;
  t.emplace_back("loss.main", Scalar(main, dt));
  t.emplace_back("loss.balance", Scalar(r.aux_loss, dt));
  t.emplace_back("loss.total", Scalar(total, dt));
  for (size_t l = 0; l < r.routing.size(); ++l) {
    const int64_t main_moe = m.num_moe_layers();
    const int64_t hf_layer = static_cast<int64_t>(l) < main_moe
                                 ? m.first_k_dense + static_cast<int64_t>(l)
                                 : m.num_layers + static_cast<int64_t>(l) - main_moe;
    t.emplace_back("routing." + std::to_string(hf_layer), ToI64(r.routing[l]));
  }
  MOE_ASSIGN_OR_RETURN(std::vector<checkpoint::HfTensor> layout, checkpoint::HfLayout(m, false));
  for (const checkpoint::HfTensor& h : layout) {
    if (h.engine_name.rfind("param/", 0) != 0) continue;  // the bias takes no gradient
    const model::Param* p = model.params().Find(h.engine_name.substr(6, h.engine_name.size() - 12));
    if (p == nullptr) return NotFoundError("no parameter for " + h.hf_name);
    int64_t n = 1;
    for (int64_t d : h.shape) n *= d;
    t.emplace_back(
        "grad." + h.hf_name,
        p->grad.Reshape({p->grad.numel()}).Rows(h.offset, h.offset + n).Clone().Reshape(h.shape));
  }
  return WriteTensors(JoinPath(out, "engine.safetensors"), t);
}

Status Run(const std::string& out, const std::string& dtype, int64_t train_steps, bool yarn) {
  const DType dt = dtype == "f64" ? DType::kF64 : DType::kF32;
  const ModelConfig m = CaseModel(yarn);
  MOE_RETURN_IF_ERROR(RemoveAll(out));
  MOE_RETURN_IF_ERROR(MakeDirs(out));
  parallel::LocalParallel local;
  model::ModelOptions mo;
  mo.dtype = dt;
  mo.max_seq_len = kSeq;
  model::Model model(m, local.ctx, 7, mo);
  if (train_steps > 0) {
    MOE_RETURN_IF_ERROR(TrainAndExport(m, train_steps, out));
    MOE_RETURN_IF_ERROR(checkpoint::LoadHfWeights(out, model, local.ctx));
  } else {
    Rng rng(5);  // a bias that steers: small values of both signs
    for (model::MoeLayer* l : model.moe_layers()) {
      std::vector<float> b(static_cast<size_t>(m.moe.num_experts));
      for (auto& x : b) x = static_cast<float>(0.2 * (rng.Uniform() - 0.5));
      l->SetBias(b);
    }
  }
  checkpoint::HfWriteOptions w;
  w.dtype = dt == DType::kF64 ? "fp64" : "fp32";
  w.mtp_table_copies = false;
  w.rope_length = kSeq;  // rope_scaling is written when YaRN applied at this length
  MOE_RETURN_IF_ERROR(checkpoint::WriteHfDirectory(m, checkpoint::ModelSource(model), out, w));
  const Tensor tokens = Tokens(m.vocab_size);
  MOE_RETURN_IF_ERROR(WriteTensors(JoinPath(out, "batch.safetensors"), {{"tokens", tokens}}));
  Node meta = Node::Map();
  meta.Set("dtype", Node::Scalar(dt == DType::kF64 ? "float64" : "float32", true));
  meta.Set("mtp_loss_weight", Node::Scalar(std::to_string(m.mtp_loss_weight)));
  meta.Set("seq_aux_loss_coeff", Node::Scalar(std::to_string(m.moe.seq_aux_loss_coeff)));
  meta.Set("batch", Node::Scalar(std::to_string(kBatch)));
  meta.Set("seq_length", Node::Scalar(std::to_string(kSeq)));
  MOE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(out, "meta.json"), ToJson(meta, 2) + "\n"));
  return DumpOutputs(model, tokens, out, dt);
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  std::string out, dtype = "f64";
  int64_t steps = 0;
  bool yarn = false;
  moe::ArgParser args("engine_dump",
                      "Writes the engine's side of a comparison with the PyTorch reference.");
  args.AddString("out", &out, "directory to write");
  args.AddString("dtype", &dtype, "f64 or f32");
  args.AddInt("train-steps", &steps,
              "train this many steps first (the real trainer), then export and reload");
  args.AddFlag("yarn", &yarn, "configure YaRN so that it applies at this sequence length");
  args.Require("out");
  if (moe::Status st = args.Parse(argc, argv); !st.ok() || (dtype != "f64" && dtype != "f32")) {
    std::fprintf(stderr, "engine_dump: %s\n",
                 st.ok() ? "--dtype: f64 or f32" : st.message().c_str());
    return 2;
  }
  if (moe::Status st = moe::Run(out, dtype, steps, yarn); !st.ok()) {
    std::fprintf(stderr, "engine_dump: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
