// Hugging Face interop: our safetensors reader against hand-built files and its writer by a round
// trip; a checkpoint exported (fp32: bitwise; bf16: within bf16 rounding) and read back with
// --init-from gives the trained model's loss; clear errors for another model or a wrong tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/file_util.h"
#include "tests/testing/testing.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/hf_io.h"
#include "worker/engine/checkpoint/safetensors.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/optimizer.h"
#include "worker/engine/train/trainer.h"

namespace moe {
namespace {

class HfInteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/moe-hf-test-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_TRUE(RemoveAll(dir_).ok());
    ASSERT_TRUE(MakeDirs(dir_).ok());
  }
  void TearDown() override { (void)RemoveAll(dir_); }
  std::string dir_;
};

// A safetensors file from its parts: the header JSON and the data bytes.
void WriteRaw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

TEST_F(HfInteropTest, ReadsAHandBuiltFile) {
  const float f[4] = {1.5f, -2.f, 3.25f, 0.f};
  const uint16_t b[3] = {0x3F80, 0xC000, 0x4040};  // bf16 1, -2, 3
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}})";
  WriteRaw(dir_ + "/x.safetensors", header, Bytes(f, 16) + Bytes(b, 6));
  auto file = checkpoint::SafetensorsFile::Open(dir_ + "/x.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  Tensor a = Tensor::Empty({2, 2}, DType::kF64);
  ASSERT_TRUE(file->Read("a", a).ok());
  EXPECT_EQ(a.ToVector<double>(), (std::vector<double>{1.5, -2, 3.25, 0}));
  Tensor bt = Tensor::Empty({3}, DType::kF32);
  ASSERT_TRUE(file->Read("b", bt).ok());
  EXPECT_EQ(bt.ToVector<float>(), (std::vector<float>{1, -2, 3}));
  Tensor wrong = Tensor::Empty({4}, DType::kF32);
  const Status st = file->Read("a", wrong);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor a is [2, 2]"), std::string::npos) << st;
}

TEST_F(HfInteropTest, RefusesMalformedFiles) {
  const std::string data(16, '\0');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",
       "bytes for F32"},  // wrong size
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       "share bytes"},
      {R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", "past the end"},
      {R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,1]}})", "unsupported dtype"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", "data_offsets"},
      {R"([1, 2])", "not a JSON object"},
  };
  for (const auto& [header, why] : cases) {
    WriteRaw(dir_ + "/bad.safetensors", header, data);
    auto f = checkpoint::SafetensorsFile::Open(dir_ + "/bad.safetensors");
    ASSERT_FALSE(f.ok()) << header;
    EXPECT_NE(f.status().message().find(why), std::string::npos) << f.status();
  }
  std::ofstream(dir_ + "/short.safetensors") << "abc";
  EXPECT_FALSE(checkpoint::SafetensorsFile::Open(dir_ + "/short.safetensors").ok());
  // fuzz_safetensors' crash (tests/fuzz/regressions/fuzz_safetensors): a header length with its top
  // bit set read as a negative that "fit", then allocated 2^63 bytes.
  std::string top(8, '\0');
  const uint64_t n = 0xef000000000000a3ull;
  std::memcpy(top.data(), &n, 8);
  std::ofstream(dir_ + "/top.safetensors", std::ios::binary) << top << std::string(64, '{');
  auto f = checkpoint::SafetensorsFile::Open(dir_ + "/top.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("does not fit the file"), std::string::npos) << f.status();
}

TEST_F(HfInteropTest, WriterRoundTripsAndTheHeaderIsAligned) {
  checkpoint::SafetensorsWriter w(dir_ + "/model.safetensors");
  w.Plan("x", "F64", {3});
  w.Plan("y", "I64", {2, 1});
  const double x[3] = {0.1, 0.2, 0.3};
  const int64_t y[2] = {7, -9};
  ASSERT_TRUE(w.Write({{"k", "v"}}, [&](const std::string& name, std::string* out) {
                 *out = name == "x" ? Bytes(x, sizeof(x)) : Bytes(y, sizeof(y));
                 return OkStatus();
               }).ok());
  auto dir = checkpoint::SafetensorsDir::Open(dir_);
  ASSERT_TRUE(dir.ok()) << dir.status();
  Tensor xt = Tensor::Empty({3}, DType::kF64), yt = Tensor::Empty({2, 1}, DType::kI64);
  ASSERT_TRUE(dir->Read("x", xt).ok());
  ASSERT_TRUE(dir->Read("y", yt).ok());
  EXPECT_EQ(xt.ToVector<double>(), (std::vector<double>{0.1, 0.2, 0.3}));
  EXPECT_EQ(yt.ToVector<int64_t>(), (std::vector<int64_t>{7, -9}));
  uint64_t n = 0;
  std::ifstream(dir_ + "/model.safetensors", std::ios::binary).read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u) << "the data starts 8-byte aligned";
}

JobSpec SmallJob(int64_t steps) {
  JobSpec s;
  s.name = "hf";
  s.model = *ModelPreset("tiny");
  s.model.vocab_size = 89;
  s.model.hidden_size = 32;
  s.model.num_heads = 2;
  s.model.num_layers = 3;
  s.model.dense_ffn_hidden = 48;
  s.model.moe.ffn_hidden = 16;
  s.data.source = "synthetic";
  s.data.seq_length = 16;
  s.data.micro_batch_size = 2;
  s.data.global_batch_size = 2;
  s.optimizer.warmup_steps = 1;
  s.optimizer.lr = 1e-2;
  s.training.steps = steps;
  return s;
}

// The trained model (restored from its checkpoint) and a model initialised from the export: the
// same loss on the same tokens.
double LossOf(model::Model& m) {
  Tensor tokens = testing::RandomInts({2, 16}, 11, 89),
         targets = testing::RandomInts({2, 16}, 12, 89);
  model::LossScales s{.ce = 1.0 / 32, .mtp = {0.3 / 15}, .aux_coeff = 1e-4 / 2};
  auto l = m.Loss(tokens, targets, s);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *l : NAN;
}

TEST_F(HfInteropTest, ExportThenInitFromGivesTheTrainedModelsLoss) {
  const JobSpec spec = SmallJob(4);
  parallel::LocalParallel local;
  train::TrainerOptions o;
  o.checkpoint_dir = dir_ + "/ckpt";
  o.peak_flops = 1e9;
  o.log_steps = false;
  ASSERT_TRUE(train::Train(spec, local.ctx, o).ok());
  model::Model trained(spec.model, local.ctx, 1, DType::kF32, Device::Cpu());
  checkpoint::CheckpointManager ckpt(o.checkpoint_dir, local.ctx, ModelFingerprint(spec), 0);
  train::Optimizer opt(spec.optimizer, trained.params(), local.ctx, /*distributed=*/false,
                       spec.model.moe.num_experts);
  ASSERT_TRUE(ckpt.Restore(trained, opt).ok());
  const double want = LossOf(trained);
  for (const std::string dtype : {"fp32", "bf16"}) {
    checkpoint::HfWriteOptions w;
    w.dtype = dtype;
    const std::string out = dir_ + "/hf-" + dtype;
    ASSERT_TRUE(checkpoint::ExportCheckpoint(o.checkpoint_dir, out, w).ok());
    model::Model fresh(spec.model, local.ctx, 999, DType::kF32,
                       Device::Cpu());  // other initial weights
    ASSERT_TRUE(checkpoint::LoadHfWeights(out, fresh, local.ctx).ok());
    const double got = LossOf(fresh);
    if (dtype == "fp32") {
      EXPECT_EQ(got, want) << "an fp32 export reloads bitwise";
    } else {
      EXPECT_NEAR(got, want, 2e-3 * want) << "a bf16 export reloads within bf16 rounding";
      EXPECT_NE(got, want);
    }
  }
  // config.json has the reference file's keys.
  auto config = ParseYaml(*ReadFileToString(dir_ + "/hf-fp32/config.json"));
  ASSERT_TRUE(config.ok());
  for (const char* k : {"model_type",
                        "architectures",
                        "kv_lora_rank",
                        "q_lora_rank",
                        "qk_nope_head_dim",
                        "qk_rope_head_dim",
                        "v_head_dim",
                        "n_routed_experts",
                        "n_shared_experts",
                        "num_experts_per_tok",
                        "n_group",
                        "topk_group",
                        "routed_scaling_factor",
                        "scoring_func",
                        "topk_method",
                        "norm_topk_prob",
                        "first_k_dense_replace",
                        "num_nextn_predict_layers",
                        "moe_intermediate_size",
                        "intermediate_size",
                        "rope_theta",
                        "rms_norm_eps",
                        "tie_word_embeddings",
                        "max_position_embeddings"}) {
    EXPECT_NE(config->Find(k), nullptr) << k;
  }
  EXPECT_EQ(config->Find("model_type")->scalar(), "deepseek_v3");
}

TEST_F(HfInteropTest, InitFromAnotherModelOrAWrongTensorIsAClearError) {
  const JobSpec spec = SmallJob(1);
  parallel::LocalParallel local;
  model::Model m(spec.model, local.ctx, 1, DType::kF32, Device::Cpu());
  checkpoint::HfWriteOptions w;
  w.dtype = "fp32";
  w.mtp_table_copies = false;
  ASSERT_TRUE(
      checkpoint::WriteHfDirectory(spec.model, checkpoint::ModelSource(m), dir_ + "/ok", w).ok());
  // Another model: the first config key that differs is named.
  ModelConfig wider = spec.model;
  wider.hidden_size = 64;
  model::Model other(wider, local.ctx, 1, DType::kF32, Device::Cpu());
  Status st = checkpoint::LoadHfWeights(dir_ + "/ok", other, local.ctx);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("hidden_size is 32"), std::string::npos) << st;
  // A tensor of another shape behind a matching config.json: named.
  auto layout = checkpoint::HfLayout(spec.model, false);
  ASSERT_TRUE(layout.ok());
  (*layout)[5].shape = {(*layout)[5].shape.back(), (*layout)[5].shape.front() + 1};
  checkpoint::SafetensorsWriter bad(dir_ + "/ok/model.safetensors");
  for (const checkpoint::HfTensor& t : *layout) bad.Plan(t.hf_name, "F32", t.shape);
  ASSERT_TRUE(bad.Write({},
                        [&](const std::string& name, std::string* out) {
                          for (const checkpoint::HfTensor& t : *layout) {
                            if (t.hf_name != name) continue;
                            int64_t n = 1;
                            for (int64_t d : t.shape) n *= d;
                            out->assign(static_cast<size_t>(n) * 4, '\0');
                          }
                          return OkStatus();
                        })
                  .ok());
  st = checkpoint::LoadHfWeights(dir_ + "/ok", m, local.ctx);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor " + (*layout)[5].hf_name + " is"), std::string::npos) << st;
}

// A model with random selection biases, written to `dir` in `dtype` as if a run of `rope_length`
// had trained it.
void WriteModel(const ModelConfig& m, const std::string& dir, const std::string& dtype,
                int64_t rope_length) {
  parallel::LocalParallel local;
  model::Model model(m, local.ctx, 5, DType::kF64, Device::Cpu());
  for (model::MoeLayer* l : model.moe_layers()) {
    std::vector<float> b(static_cast<size_t>(m.moe.num_experts));
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * static_cast<float>(i) - 0.02f;
    l->SetBias(b);
  }
  checkpoint::HfWriteOptions w;
  w.dtype = dtype;
  w.max_position_embeddings = std::max<int64_t>(rope_length, 64);
  w.rope_length = rope_length;
  ASSERT_TRUE(checkpoint::WriteHfDirectory(m, checkpoint::ModelSource(model), dir, w).ok());
}

Node Config(const std::string& dir) {
  auto c = ParseYaml(*ReadFileToString(dir + "/config.json"));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Node();
}

ModelConfig YarnModel() {
  ModelConfig m = SmallJob(1).model;
  m.rope_scaling = RopeScalingConfig{.type = "yarn",
                                     .factor = 4,
                                     .original_max_position_embeddings = 64,
                                     .beta_fast = 32,
                                     .beta_slow = 1,
                                     .mscale = 0.707,
                                     .mscale_all_dim = 0.707};
  return m;
}

// rope_scaling only where YaRN applied (transformers applies it whenever present), with the run's
// values; the conventions and the weights' true dtype written out.
TEST_F(HfInteropTest, TheConfigSaysWhatTheModelIs) {
  const ModelConfig m = YarnModel();
  WriteModel(m, dir_ + "/short", "fp32", 64);  // trained at the original length: no YaRN
  const Node short_run = Config(dir_ + "/short");
  ASSERT_NE(short_run.Find("rope_scaling"), nullptr);
  EXPECT_TRUE(short_run.Find("rope_scaling")->IsNull());
  EXPECT_EQ(short_run.Find("torch_dtype")->scalar(), "float32");
  WriteModel(m, dir_ + "/long", "bf16", 256);  // above it: YaRN
  const Node long_run = Config(dir_ + "/long");
  const Node* y = long_run.Find("rope_scaling");
  ASSERT_TRUE(y != nullptr && y->IsMap());
  EXPECT_EQ(y->Find("type")->scalar(), "yarn");
  EXPECT_EQ(y->Find("factor")->scalar(), "4");
  EXPECT_EQ(y->Find("original_max_position_embeddings")->scalar(), "64");
  EXPECT_EQ(y->Find("mscale")->scalar(), "0.70699999999999996");
  EXPECT_EQ(y->Find("mscale_all_dim")->scalar(), "0.70699999999999996");
  EXPECT_EQ(long_run.Find("max_position_embeddings")->scalar(), "256");
  EXPECT_EQ(long_run.Find("torch_dtype")->scalar(), "bfloat16");
  const std::pair<const char*, const char*> conventions[] = {
      {"rope_interleave", "true"}, {"norm_topk_prob", "true"}, {"scoring_func", "sigmoid"},
      {"topk_method", "noaux_tc"}, {"n_group", "4"},           {"topk_group", "2"},
      {"moe_layer_freq", "1"},     {"hidden_act", "silu"},     {"num_nextn_predict_layers", "1"}};
  for (const auto& [key, value] : conventions) {
    ASSERT_NE(long_run.Find(key), nullptr) << key;
    EXPECT_EQ(long_run.Find(key)->scalar(), value) << key;
  }
  // Read back: the same model, and the length its rotary frequencies were built for.
  int64_t rope_length = 0;
  auto back = checkpoint::HfModelConfig(dir_ + "/long", &rope_length);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rope_scaling, m.rope_scaling);
  EXPECT_EQ(back->moe, m.moe);
  EXPECT_EQ(back->attention, m.attention);
  EXPECT_EQ(back->init_std, m.init_std);
  EXPECT_EQ(rope_length, 256);
  auto plain = checkpoint::HfModelConfig(dir_ + "/short");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->rope_scaling.type, "none");
}

// export -> what --init-from reads -> export: the same bytes, in every dtype, with and without
// YaRN, with and without MTP's table copies.
TEST_F(HfInteropTest, ExportInitFromExportIsByteIdentical) {
  struct Case {
    std::string dtype;
    ModelConfig model;
    int64_t rope_length;
  };
  ModelConfig softmax = SmallJob(1).model;
  softmax.moe.score_function = "softmax";
  softmax.moe.expert_bias = false;
  softmax.moe.route_scale = 2.5;
  softmax.mtp_depth = 0;
  for (const Case& c : {Case{"fp32", SmallJob(1).model, 16}, Case{"bf16", YarnModel(), 256},
                        Case{"fp64", YarnModel(), 32}, Case{"fp32", softmax, 16}}) {
    const std::string a = dir_ + "/a-" + c.dtype, b = dir_ + "/b-" + c.dtype;
    ASSERT_TRUE(RemoveAll(a).ok() && RemoveAll(b).ok());
    WriteModel(c.model, a, c.dtype, c.rope_length);
    const Status st = checkpoint::RewriteHfDirectory(a, b, "");
    ASSERT_TRUE(st.ok()) << st;
    auto names = ListDir(a);
    ASSERT_TRUE(names.ok());
    EXPECT_EQ(*names, *ListDir(b));
    for (const std::string& f : *names) {
      EXPECT_EQ(*ReadFileToString(a + "/" + f), *ReadFileToString(b + "/" + f))
          << c.dtype << ": " << f << " differs after the round trip";
    }
  }
}

// Each convention the engine cannot run is refused by its key's name, whoever reads the directory
// (moe-eval --hf, moe-generate --hf, moe-train --init-from).
TEST_F(HfInteropTest, AnUnsupportedConventionIsRefusedByName) {
  WriteModel(SmallJob(1).model, dir_ + "/ok", "fp32", 16);
  const std::string good = *ReadFileToString(dir_ + "/ok/config.json");
  ASSERT_TRUE(checkpoint::HfModelConfig(dir_ + "/ok").ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("rope_interleave": true)", R"("rope_interleave": false)"},
      {R"("norm_topk_prob": true)", R"("norm_topk_prob": false)"},
      {R"("scoring_func": "sigmoid")", R"("scoring_func": "relu")"},
      {R"("topk_method": "noaux_tc")", R"("topk_method": "group_limited_sigmoid")"},
      {R"("hidden_act": "silu")", R"("hidden_act": "gelu")"},
      {R"("tie_word_embeddings": false)", R"("tie_word_embeddings": true)"},
      {R"("attention_bias": false)", R"("attention_bias": true)"},
      {R"("moe_layer_freq": 1)", R"("moe_layer_freq": 2)"},
      {R"("model_type": "deepseek_v3")", R"("model_type": "llama")"},
      {R"("rope_scaling": null)", R"("rope_scaling": {"type": "linear", "factor": 2})"},
      {R"("rope_scaling": null)",
       R"("rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 8, )"
       R"("mscale": 1, "mscale_all_dim": 0.7})"},
      {R"("rope_scaling": null)",
       R"("rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 8})"},
      {R"("rope_scaling": null)",
       R"("rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 64, )"
       R"("mscale": 1, "mscale_all_dim": 1})"},
      {R"("hidden_act": "silu")", R"("hidden_act": "silu", "quantization_config": {"x": 1})"},
  };
  const std::vector<std::string> names = {"rope_interleave",
                                          "norm_topk_prob",
                                          "scoring_func",
                                          "topk_method",
                                          "hidden_act",
                                          "tie_word_embeddings",
                                          "attention_bias",
                                          "moe_layer_freq",
                                          "model_type",
                                          "rope_scaling.type",
                                          "rope_scaling.mscale",
                                          "rope_scaling.mscale",
                                          "max_position_embeddings",
                                          "quantization_config"};
  ASSERT_EQ(cases.size(), names.size());
  parallel::LocalParallel local;
  model::Model model(SmallJob(1).model, local.ctx, 1, DType::kF32, Device::Cpu());
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string text = good;
    const size_t at = text.find(cases[i].first);
    ASSERT_NE(at, std::string::npos) << cases[i].first;
    text.replace(at, cases[i].first.size(), cases[i].second);
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/ok/config.json", text).ok());
    const Status st = checkpoint::HfModelConfig(dir_ + "/ok").status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << cases[i].second;
    EXPECT_NE(st.message().find(names[i]), std::string::npos) << st;
    // --init-from takes only the weights (the job sets the rotary frequencies), so a config whose
    // max_position_embeddings would not apply its YaRN does not stop it; every convention does.
    if (names[i] == "max_position_embeddings") continue;
    const Status init = checkpoint::LoadHfWeights(dir_ + "/ok", model, local.ctx);
    EXPECT_FALSE(init.ok()) << "--init-from accepted " << cases[i].second;
  }
}

}  // namespace
}  // namespace moe
