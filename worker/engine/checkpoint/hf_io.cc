#include "worker/engine/checkpoint/hf_io.h"

#include <cstring>
#include <map>
#include <optional>

#include "common/file_util.h"
#include "common/job_spec.h"
#include "kernels/elementwise.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/safetensors.h"
#include "worker/engine/data/tokenizer.h"
#include "worker/engine/parallel/local_communicator.h"

namespace moe::checkpoint {
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<std::pair<DType, std::string>> OutputType(const std::string& dtype) {
  if (dtype == "bf16") return std::make_pair(DType::kBF16, std::string("BF16"));
  if (dtype == "fp32") return std::make_pair(DType::kF32, std::string("F32"));
  if (dtype == "fp64") return std::make_pair(DType::kF64, std::string("F64"));
  return InvalidArgumentError("--dtype: '" + dtype + "' is not bf16, fp32 or fp64");
}

// Splits the layout into files of at most max_bytes (a tensor larger than that gets a file alone).
std::vector<std::vector<const HfTensor*>> SplitFiles(const std::vector<HfTensor>& layout,
                                                     int64_t esize, int64_t max_bytes) {
  std::vector<std::vector<const HfTensor*>> files(1);
  int64_t in_file = 0;
  for (const HfTensor& t : layout) {
    const int64_t bytes = Numel(t.shape) * esize;
    if (in_file > 0 && in_file + bytes > max_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(&t);
    in_file += bytes;
  }
  return files;
}

std::string FileName(size_t i, size_t n) {
  if (n == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

Status WriteFile(const std::vector<const HfTensor*>& tensors, const HfSource& source,
                 const std::string& path, DType out, const std::string& st_dtype) {
  SafetensorsWriter w(path);
  std::map<std::string, const HfTensor*> by_name;
  for (const HfTensor* t : tensors) {
    w.Plan(t->hf_name, st_dtype, t->shape);
    by_name[t->hf_name] = t;
  }
  return w.Write({{"format", "pt"}}, [&](const std::string& name, std::string* bytes) -> Status {
    const HfTensor& t = *by_name.at(name);
    Tensor values = Tensor::Empty(t.shape, out == DType::kF64 ? DType::kF64 : DType::kF32);
    MOE_RETURN_IF_ERROR(source(t, values));
    Tensor cast = values;
    if (out != values.dtype()) {
      cast = Tensor::Empty(t.shape, out);
      kernels::Convert(values, cast);
    }
    bytes->assign(static_cast<const char*>(cast.raw()), cast.nbytes());
    return OkStatus();
  });
}

std::string TorchDtype(DType t) {
  return t == DType::kBF16 ? "bfloat16" : t == DType::kF64 ? "float64" : "float32";
}

Node Bool(bool b) { return Node::Scalar(b ? "true" : "false"); }
Node IntNode(int64_t v) { return Node::Scalar(std::to_string(v)); }

// tokenizer.model, and tokenizer_config.json as transformers reads a SentencePiece model: the slow
// LlamaTokenizer (it loads tokenizer.model and encodes as SentencePiece does with legacy: true).
// Our documents carry no BOS (each ends with EOS), so none is added.
Status WriteTokenizerFiles(const data::Tokenizer& tok, const std::string& out_dir,
                           const HfWriteOptions& o) {
  MOE_ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(tok.path()));
  MOE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(out_dir, "tokenizer.model"), bytes));
  Node t = Node::Map();
  t.Set("tokenizer_class", Node::Scalar("LlamaTokenizer", true));
  const std::pair<const char*, int64_t> specials[] = {{"bos_token", tok.bos_id()},
                                                      {"eos_token", tok.eos_id()},
                                                      {"unk_token", tok.unk_id()},
                                                      {"pad_token", tok.pad_id()}};
  for (const auto& [key, id] : specials) {
    if (id >= 0) t.Set(key, Node::Scalar(tok.Piece(id), true));
  }
  t.Set("add_bos_token", Bool(false));
  t.Set("add_eos_token", Bool(false));
  t.Set("legacy", Bool(true));
  t.Set("clean_up_tokenization_spaces", Bool(false));
  t.Set("model_max_length", IntNode(o.max_position_embeddings));
  t.Set("sp_model_kwargs", Node::Map());
  MOE_RETURN_IF_ERROR(
      WriteFileAtomic(JoinPath(out_dir, "tokenizer_config.json"), ToJson(t, 2) + "\n"));
  Node g = Node::Map();
  if (tok.bos_id() >= 0) g.Set("bos_token_id", IntNode(tok.bos_id()));
  if (tok.eos_id() >= 0) g.Set("eos_token_id", IntNode(tok.eos_id()));
  if (tok.pad_id() >= 0) g.Set("pad_token_id", IntNode(tok.pad_id()));
  return WriteFileAtomic(JoinPath(out_dir, "generation_config.json"), ToJson(g, 2) + "\n");
}

// config.json: the model, its rotary setup, the weights' dtype and the tokenizer's special ids.
Status WriteConfig(const ModelConfig& m, const data::Tokenizer* tok, DType dtype,
                   const std::string& out_dir, const HfWriteOptions& o) {
  HfConfigInfo info;
  info.max_position_embeddings = o.max_position_embeddings;
  info.rope_length = o.rope_length;
  info.torch_dtype = TorchDtype(dtype);
  if (tok != nullptr) {
    if (tok->vocab_size() > m.vocab_size) {
      return InvalidArgumentError(
          "tokenizer " + tok->path() + ": " + std::to_string(tok->vocab_size()) +
          " pieces, more than the model's vocab_size " + std::to_string(m.vocab_size));
    }
    info.bos_token_id = tok->bos_id();
    info.eos_token_id = tok->eos_id();
  }
  return WriteFileAtomic(JoinPath(out_dir, "config.json"), ToJson(HfConfig(m, info), 2) + "\n");
}

}  // namespace

Status WriteHfDirectory(const ModelConfig& m, const HfSource& source, const std::string& out_dir,
                        const HfWriteOptions& o) {
  MOE_ASSIGN_OR_RETURN(auto type, OutputType(o.dtype));
  MOE_ASSIGN_OR_RETURN(std::vector<HfTensor> layout, HfLayout(m, o.mtp_table_copies));
  std::optional<data::Tokenizer> tok;
  if (!o.tokenizer.empty()) {
    MOE_ASSIGN_OR_RETURN(data::Tokenizer t, data::Tokenizer::Load(o.tokenizer));
    tok.emplace(std::move(t));
  }
  MOE_RETURN_IF_ERROR(MakeDirs(out_dir));
  MOE_RETURN_IF_ERROR(WriteConfig(m, tok ? &*tok : nullptr, type.first, out_dir, o));
  if (tok) MOE_RETURN_IF_ERROR(WriteTokenizerFiles(*tok, out_dir, o));
  const auto files =
      SplitFiles(layout, static_cast<int64_t>(DTypeSize(type.first)), o.max_file_bytes);
  Node weight_map = Node::Map();
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string name = FileName(i, files.size());
    MOE_RETURN_IF_ERROR(
        WriteFile(files[i], source, JoinPath(out_dir, name), type.first, type.second));
    for (const HfTensor* t : files[i]) weight_map.Set(t->hf_name, Node::Scalar(name, true));
    if (o.progress)
      o.progress("wrote " + name + " (" + std::to_string(files[i].size()) + " tensors)");
  }
  if (files.size() > 1) {
    Node index = Node::Map();
    index.Set("metadata", Node::Map());
    index.Set("weight_map", std::move(weight_map));
    MOE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(out_dir, "model.safetensors.index.json"),
                                        ToJson(index, 2) + "\n"));
  }
  return OkStatus();
}

StatusOr<JobSpec> CheckpointJobSpec(const std::string& checkpoint, std::string* step_dir) {
  *step_dir = checkpoint;
  if (!PathExists(JoinPath(checkpoint, "MANIFEST.json"))) {
    MOE_ASSIGN_OR_RETURN(*step_dir, LatestCheckpoint(checkpoint));
  }
  MOE_ASSIGN_OR_RETURN(CheckpointReader reader,
                       CheckpointReader::Open(*step_dir, /*verify=*/false));
  const Node* spec_node = reader.manifest().Find("spec");
  if (spec_node == nullptr)
    return FailedPreconditionError(
        *step_dir + ": the manifest carries no job spec (written by an older engine)");
  return ParseJobSpec(*spec_node);
}

Status ExportCheckpoint(const std::string& checkpoint, const std::string& out_dir,
                        const HfWriteOptions& options) {
  std::string step_dir;
  MOE_ASSIGN_OR_RETURN(JobSpec spec, CheckpointJobSpec(checkpoint, &step_dir));
  MOE_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(step_dir, /*verify=*/true));
  MOE_RETURN_IF_ERROR(reader.CheckComplete());
  if (options.progress) options.progress("exporting " + step_dir);
  HfWriteOptions o = options;
  o.max_position_embeddings = std::max<int64_t>(
      spec.data.seq_length, spec.model.rope_scaling.original_max_position_embeddings);
  o.rope_length = spec.data.seq_length;  // what the run built its rotary frequencies for
  if (o.tokenizer.empty() && o.tokenizer_from_run && spec.data.source == "indexed") {
    StatusOr<std::string> tok = data::RunTokenizerPath(spec.data.path);
    if (!tok.ok()) {
      return FailedPreconditionError(
          "the run's tokenizer: " + tok.status().message() +
          " (run from where the run's data.path resolves, or give --tokenizer FILE, or "
          "--no-tokenizer)");
    }
    o.tokenizer = *tok;
  }
  HfSource source = [&reader](const HfTensor& t, const Tensor& dst) {
    return reader.Read(t.engine_name, t.offset, dst);
  };
  return WriteHfDirectory(spec.model, source, out_dir, o);
}

HfSource ModelSource(model::Model& model) {
  return [&model](const HfTensor& t, const Tensor& dst) -> Status {
    Tensor src;
    if (t.engine_name.rfind("bias/", 0) == 0) {
      for (model::MoeLayer* l : model.moe_layers()) {
        if ("bias/" + l->name() == t.engine_name) src = l->bias();
      }
    } else {
      const std::string name =
          t.engine_name.substr(6, t.engine_name.size() - 6 - 6);  // param/<name>/value
      if (model::Param* p = model.params().Find(name)) src = p->value;
    }
    if (!src.defined()) return NotFoundError("the model has no tensor " + t.engine_name);
    MOE_CHECK(src.numel() == Numel(t.engine_shape))
        << "ModelSource needs a W = 1 model (" << t.engine_name << ")";
    Tensor host =
        src.Clone(Device::Cpu()).Reshape({src.numel()}).Rows(t.offset, t.offset + dst.numel());
    kernels::Convert(host.Clone(), dst.Reshape({dst.numel()}));
    return OkStatus();
  };
}

namespace {

// This rank's range of an engine tensor: all of it, or its experts' share.
struct LocalRange {
  Tensor data;    // flattened, on the model's device
  int64_t begin;  // in the global tensor
};

std::map<std::string, LocalRange> LocalTensors(model::Model& model) {
  std::map<std::string, LocalRange> out;
  for (const auto& p : model.params().all()) {
    const int64_t begin = p->global_begin();
    out["param/" + p->name + "/value"] = {p->value.Reshape({p->value.numel()}), begin};
  }
  for (model::MoeLayer* l : model.moe_layers()) out["bias/" + l->name()] = {l->bias(), 0};
  return out;
}

}  // namespace

Status LoadHfWeights(const std::string& dir, model::Model& model,
                     const parallel::ParallelContext& par) {
  (void)par;  // each rank reads its own experts: the expert ranges of its parameters say which
  MOE_ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(JoinPath(dir, "config.json")));
  MOE_ASSIGN_OR_RETURN(Node config, ParseYaml(config_text));
  MOE_RETURN_IF_ERROR(CheckHfConventions(config).WithPrefix("--init-from " + dir));
  MOE_RETURN_IF_ERROR(CheckHfConfig(config, model.config()).WithPrefix("--init-from " + dir));
  MOE_ASSIGN_OR_RETURN(SafetensorsDir weights, SafetensorsDir::Open(dir));
  MOE_ASSIGN_OR_RETURN(std::vector<HfTensor> layout,
                       HfLayout(model.config(), /*mtp_table_copies=*/false));
  std::map<std::string, LocalRange> local = LocalTensors(model);
  for (const HfTensor& t : layout) {
    auto it = local.find(t.engine_name);
    if (it == local.end()) continue;  // bias of a model without one
    const LocalRange& r = it->second;
    const int64_t n = Numel(t.shape);
    if (t.offset < r.begin || t.offset + n > r.begin + r.data.numel())
      continue;  // another rank's expert
    if (weights.Find(t.hf_name) == nullptr)
      return InvalidArgumentError("--init-from " + dir + ": tensor " + t.hf_name + " is missing");
    Tensor host = Tensor::Empty(t.shape, r.data.dtype() == DType::kF64 ? DType::kF64 : DType::kF32);
    MOE_RETURN_IF_ERROR(weights.Read(t.hf_name, host).WithPrefix("--init-from " + dir));
    r.data.Rows(t.offset - r.begin, t.offset - r.begin + n).CopyFrom(host.Reshape({n}));
  }
  model.params().SyncCompute();
  return OkStatus();
}

StatusOr<HfWriteOptions> HfRewriteOptions(const std::string& dir) {
  HfWriteOptions o;
  MOE_ASSIGN_OR_RETURN(const ModelConfig m, HfModelConfig(dir, &o.max_position_embeddings));
  o.rope_length = o.max_position_embeddings;
  if (PathExists(JoinPath(dir, "tokenizer.model"))) o.tokenizer = JoinPath(dir, "tokenizer.model");
  MOE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(JoinPath(dir, "config.json")));
  MOE_ASSIGN_OR_RETURN(const Node c, ParseYaml(text));
  const Node* d = c.Find("torch_dtype");
  const std::string dtype = d == nullptr || d->IsNull() ? "bfloat16" : d->scalar();
  if (dtype == "float32") {
    o.dtype = "fp32";
  } else if (dtype == "float64") {
    o.dtype = "fp64";
  } else if (dtype != "bfloat16") {
    return InvalidArgumentError(dir + "/config.json: torch_dtype is " + dtype +
                                ": supported: bfloat16, float32, float64");
  }
  MOE_ASSIGN_OR_RETURN(SafetensorsDir w, SafetensorsDir::Open(dir));
  o.mtp_table_copies = m.MtpTrains() && w.Find("model.layers." + std::to_string(m.num_layers) +
                                               ".embed_tokens.weight") != nullptr;
  return o;
}

Status RewriteHfDirectory(const std::string& dir, const std::string& out_dir,
                          const std::string& dtype) {
  MOE_ASSIGN_OR_RETURN(const ModelConfig m, HfModelConfig(dir));
  MOE_ASSIGN_OR_RETURN(HfWriteOptions o, HfRewriteOptions(dir));
  if (!dtype.empty()) o.dtype = dtype;
  parallel::LocalParallel local;
  model::Model model(m, local.ctx, 0, o.dtype == "fp64" ? DType::kF64 : DType::kF32, Device::Cpu());
  MOE_RETURN_IF_ERROR(LoadHfWeights(dir, model, local.ctx));
  return WriteHfDirectory(m, ModelSource(model), out_dir, o);
}

Status LoadCheckpointWeights(const std::string& step_dir, model::Model& model) {
  MOE_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(step_dir, /*verify=*/true));
  MOE_RETURN_IF_ERROR(reader.CheckComplete());
  for (const auto& [name, r] : LocalTensors(model)) {
    const std::vector<int64_t> stored = reader.GlobalShape(name);
    if (stored.empty())
      return DataLossError(step_dir + ": no tensor " + name + " in the checkpoint");
    MOE_RETURN_IF_ERROR(reader.Read(name, r.begin, r.data));
  }
  model.params().SyncCompute();
  return OkStatus();
}

namespace {

// Reads integer `key` of config.json into *out (missing: keep; null: 0).
Status HfInt(const Node& c, const char* key, int64_t* out) {
  const Node* n = c.Find(key);
  if (n == nullptr) return OkStatus();
  if (n->IsNull()) {
    *out = 0;
    return OkStatus();
  }
  MOE_ASSIGN_OR_RETURN(*out, n->AsInt(std::string("config.json: ") + key));
  return OkStatus();
}

Status HfDouble(const Node& c, const char* key, double* out) {
  const Node* n = c.Find(key);
  if (n == nullptr || n->IsNull()) return OkStatus();
  MOE_ASSIGN_OR_RETURN(*out, n->AsDouble(std::string("config.json: ") + key));
  return OkStatus();
}

Status HfRopeScaling(const Node& c, RopeScalingConfig* r) {
  const Node* y = c.Find("rope_scaling");
  if (y == nullptr || y->IsNull()) return OkStatus();
  r->type = "yarn";
  MOE_RETURN_IF_ERROR(HfDouble(*y, "factor", &r->factor));
  MOE_RETURN_IF_ERROR(
      HfInt(*y, "original_max_position_embeddings", &r->original_max_position_embeddings));
  MOE_RETURN_IF_ERROR(HfDouble(*y, "beta_fast", &r->beta_fast));
  MOE_RETURN_IF_ERROR(HfDouble(*y, "beta_slow", &r->beta_slow));
  MOE_RETURN_IF_ERROR(HfDouble(*y, "mscale", &r->mscale));
  return HfDouble(*y, "mscale_all_dim", &r->mscale_all_dim);
}

}  // namespace

StatusOr<ModelConfig> HfModelConfig(const std::string& dir, int64_t* rope_length) {
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(JoinPath(dir, "config.json")));
  MOE_ASSIGN_OR_RETURN(Node c, ParseYaml(text));
  MOE_RETURN_IF_ERROR(CheckHfConventions(c).WithPrefix(dir));
  ModelConfig m;
  auto& a = m.attention;
  auto& e = m.moe;
  int64_t max_pos = 0;
  const std::pair<const char*, int64_t*> ints[] = {{"vocab_size", &m.vocab_size},
                                                   {"hidden_size", &m.hidden_size},
                                                   {"intermediate_size", &m.dense_ffn_hidden},
                                                   {"moe_intermediate_size", &e.ffn_hidden},
                                                   {"num_hidden_layers", &m.num_layers},
                                                   {"num_attention_heads", &m.num_heads},
                                                   {"n_routed_experts", &e.num_experts},
                                                   {"n_shared_experts", &e.num_shared_experts},
                                                   {"num_experts_per_tok", &e.top_k},
                                                   {"n_group", &e.num_groups},
                                                   {"topk_group", &e.topk_groups},
                                                   {"first_k_dense_replace", &m.first_k_dense},
                                                   {"q_lora_rank", &a.q_lora_rank},
                                                   {"kv_lora_rank", &a.kv_lora_rank},
                                                   {"qk_nope_head_dim", &a.qk_nope_head_dim},
                                                   {"qk_rope_head_dim", &a.qk_rope_head_dim},
                                                   {"v_head_dim", &a.v_head_dim},
                                                   {"num_nextn_predict_layers", &m.mtp_depth},
                                                   {"max_position_embeddings", &max_pos}};
  for (const auto& [key, out] : ints) MOE_RETURN_IF_ERROR(HfInt(c, key, out));
  MOE_RETURN_IF_ERROR(HfDouble(c, "routed_scaling_factor", &e.route_scale));
  MOE_RETURN_IF_ERROR(HfDouble(c, "rope_theta", &m.rope_theta));
  MOE_RETURN_IF_ERROR(HfDouble(c, "rms_norm_eps", &m.norm_eps));
  MOE_RETURN_IF_ERROR(HfDouble(c, "initializer_range", &m.init_std));
  MOE_RETURN_IF_ERROR(HfRopeScaling(c, &m.rope_scaling));
  if (const Node* s = c.Find("scoring_func"); s != nullptr && !s->IsNull())
    e.score_function = s->scalar();
  // CheckHfConventions allowed noaux_tc (the bias), greedy and group_limited_greedy (none).
  if (const Node* t = c.Find("topk_method"); t != nullptr && !t->IsNull())
    e.expert_bias = t->scalar() == "noaux_tc";
  a.type = a.kv_lora_rank > 0 ? "mla" : "mha";
  if (m.rope_scaling.type == "yarn" && max_pos <= m.rope_scaling.original_max_position_embeddings) {
    return InvalidArgumentError(
        dir + "/config.json: rope_scaling is given but max_position_embeddings " +
        std::to_string(max_pos) + " does not exceed its original_max_position_embeddings " +
        std::to_string(m.rope_scaling.original_max_position_embeddings) +
        " (this engine applies YaRN only above the original length; transformers applies it "
        "always)");
  }
  if (rope_length != nullptr) *rope_length = max_pos;
  MOE_RETURN_IF_ERROR(ValidateModel(m, dir + "/config.json"));
  MOE_RETURN_IF_ERROR(CheckHfConfig(c, m).WithPrefix(dir));
  return m;
}

}  // namespace moe::checkpoint
