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
  auto file = SafetensorsFile::Open(dir_ + "/x.safetensors");
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
    auto f = SafetensorsFile::Open(dir_ + "/bad.safetensors");
    ASSERT_FALSE(f.ok()) << header;
    EXPECT_NE(f.status().message().find(why), std::string::npos) << f.status();
  }
  std::ofstream(dir_ + "/short.safetensors") << "abc";
  EXPECT_FALSE(SafetensorsFile::Open(dir_ + "/short.safetensors").ok());
  // fuzz_safetensors' crash (tests/fuzz/regressions/fuzz_safetensors): a header length with its top
  // bit set read as a negative that "fit", then allocated 2^63 bytes.
  std::string top(8, '\0');
  const uint64_t n = 0xef000000000000a3ull;
  std::memcpy(top.data(), &n, 8);
  std::ofstream(dir_ + "/top.safetensors", std::ios::binary) << top << std::string(64, '{');
  auto f = SafetensorsFile::Open(dir_ + "/top.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("does not fit the file"), std::string::npos) << f.status();
}

TEST_F(HfInteropTest, WriterRoundTripsAndTheHeaderIsAligned) {
  SafetensorsWriter w(dir_ + "/model.safetensors");
  w.Plan("x", "F64", {3});
  w.Plan("y", "I64", {2, 1});
  const double x[3] = {0.1, 0.2, 0.3};
  const int64_t y[2] = {7, -9};
  ASSERT_TRUE(w.Write({{"k", "v"}}, [&](const std::string& name, std::string* out) {
                 *out = name == "x" ? Bytes(x, sizeof(x)) : Bytes(y, sizeof(y));
                 return OkStatus();
               }).ok());
  auto dir = SafetensorsDir::Open(dir_);
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
double LossOf(Model& m) {
  Tensor tokens = testing::RandomInts({2, 16}, 11, 89),
         targets = testing::RandomInts({2, 16}, 12, 89);
  LossScales s{.ce = 1.0 / 32, .mtp = {0.3 / 15}, .aux_coeff = 1e-4 / 2};
  auto l = m.Loss(tokens, targets, s);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *l : NAN;
}

TEST_F(HfInteropTest, ExportThenInitFromGivesTheTrainedModelsLoss) {
  const JobSpec spec = SmallJob(4);
  LocalParallel local;
  TrainerOptions o;
  o.checkpoint_dir = dir_ + "/ckpt";
  o.peak_flops = 1e9;
  o.log_steps = false;
  ASSERT_TRUE(Train(spec, local.ctx, o).ok());
  Model trained(spec.model, local.ctx, 1, DType::kF32, Device::Cpu());
  CheckpointManager ckpt(o.checkpoint_dir, local.ctx, ModelFingerprint(spec), 0);
  Optimizer opt(spec.optimizer, trained.params(), local.ctx, /*distributed=*/false,
                spec.model.moe.num_experts);
  ASSERT_TRUE(ckpt.Restore(trained, opt).ok());
  const double want = LossOf(trained);
  for (const std::string dtype : {"fp32", "bf16"}) {
    HfWriteOptions w;
    w.dtype = dtype;
    const std::string out = dir_ + "/hf-" + dtype;
    ASSERT_TRUE(ExportCheckpoint(o.checkpoint_dir, out, w).ok());
    Model fresh(spec.model, local.ctx, 999, DType::kF32, Device::Cpu());  // other initial weights
    ASSERT_TRUE(LoadHfWeights(out, fresh, local.ctx).ok());
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
  LocalParallel local;
  Model m(spec.model, local.ctx, 1, DType::kF32, Device::Cpu());
  HfWriteOptions w;
  w.dtype = "fp32";
  w.mtp_table_copies = false;
  ASSERT_TRUE(WriteHfDirectory(spec.model, ModelSource(m), dir_ + "/ok", w).ok());
  // Another model: the first config key that differs is named.
  ModelConfig wider = spec.model;
  wider.hidden_size = 64;
  Model other(wider, local.ctx, 1, DType::kF32, Device::Cpu());
  Status st = LoadHfWeights(dir_ + "/ok", other, local.ctx);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("hidden_size is 32"), std::string::npos) << st;
  // A tensor of another shape behind a matching config.json: named.
  auto layout = HfLayout(spec.model, false);
  ASSERT_TRUE(layout.ok());
  (*layout)[5].shape = {(*layout)[5].shape.back(), (*layout)[5].shape.front() + 1};
  SafetensorsWriter bad(dir_ + "/ok/model.safetensors");
  for (const HfTensor& t : *layout) bad.Plan(t.hf_name, "F32", t.shape);
  ASSERT_TRUE(bad.Write({},
                        [&](const std::string& name, std::string* out) {
                          for (const HfTensor& t : *layout) {
                            if (t.hf_name != name) continue;
                            int64_t n = 1;
                            for (int64_t d : t.shape) n *= d;
                            out->assign(static_cast<size_t>(n) * 4, '\0');
                          }
                          return OkStatus();
                        })
                  .ok());
  st = LoadHfWeights(dir_ + "/ok", m, local.ctx);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor " + (*layout)[5].hf_name + " is"), std::string::npos) << st;
}

}  // namespace
}  // namespace moe
