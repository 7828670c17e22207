#include "common/job_spec.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

#include "common/flops.h"
#include "common/job_spec_schema.h"
#include "common/label_selector.h"
#include "common/path_roots.h"

namespace moe {
namespace {

const char* kJob = R"(
apiVersion: moe/v1
kind: TrainingJob
metadata: {name: tiny-dsv3, priority: 0}
spec:
  model: {preset: tiny}
  parallelism: {world_size: 2, expert_parallel: 2}
  placement: {expert_group_within: rack}
  data: {path: data/fortunes, seq_length: 256, micro_batch_size: 8, global_batch_size: 16}
  optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 50, weight_decay: 0.1, grad_clip: 1.0}
  training: {steps: 300, seed: 1234}
  checkpoint: {dir: /tmp/moe-ckpt, interval_steps: 50}
  resources: {device: cpu}
  max_restarts: 3
)";

TEST(JobSpec, ParsesTheDesignExample) {
  auto spec = ParseJobSpecText(kJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "tiny-dsv3");
  EXPECT_EQ(spec->model.hidden_size, 128);
  EXPECT_EQ(spec->parallelism.expert_parallel, 2);
  EXPECT_EQ(spec->micro_batches_per_rank(), 1);
  EXPECT_EQ(spec->training.seed, 1234u);
  // Written out and read back, it is the same job.
  auto again = ParseJobSpec(JobSpecToNode(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ToJson(JobSpecToNode(*again)), ToJson(JobSpecToNode(*spec)));
  EXPECT_EQ(ModelFingerprint(*again), ModelFingerprint(*spec));
}

TEST(JobSpec, PresetFieldsCanBeOverridden) {
  auto spec = ParseJobSpecText(
      std::string(kJob).replace(std::string(kJob).find("{preset: tiny}"), 14,
                                "{preset: tiny, hidden_size: 64, moe: {top_k: 1}}"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.hidden_size, 64);
  EXPECT_EQ(spec->model.moe.top_k, 1);
  EXPECT_EQ(spec->model.moe.num_experts, 8);  // from the preset
}

struct Bad {
  std::string from, to, message;
};

// MLA's heads have their own sizes: hidden_size need not split into them (it must for MHA, above).
TEST(JobSpec, MlaHeadsNeedNotDivideTheHiddenSize) {
  std::string text = kJob;
  const size_t at = text.find("{preset: tiny}");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 14, "{preset: tiny, num_heads: 3}");
  auto spec = ParseJobSpecText(text);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_heads, 3);
}

class BadJobSpec : public ::testing::TestWithParam<Bad> {};

TEST_P(BadJobSpec, NamesTheField) {
  const Bad& b = GetParam();
  std::string text = kJob;
  const size_t at = text.find(b.from);
  ASSERT_NE(at, std::string::npos) << b.from;
  text.replace(at, b.from.size(), b.to);
  auto spec = ParseJobSpecText(text);
  ASSERT_FALSE(spec.ok()) << "accepted: " << b.to;
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(b.message), std::string::npos)
      << "got: " << spec.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadJobSpec,
    ::testing::Values(
        Bad{"{preset: tiny}", "{preset: tiny, moe: {topk: 2}}",
            "spec.model.moe.topk: unknown field (did you mean 'top_k'?)"},
        Bad{"{preset: tiny}", "{preset: huge}", "spec.model.preset: unknown preset 'huge'"},
        // The batch's product past int64 is refused, not computed (it was undefined behaviour,
        // found by job_spec_proto_test's random specs under UBSan).
        Bad{"micro_batch_size: 8", "micro_batch_size: 9223372036854775807",
            "spec.data.micro_batch_size: 9223372036854775807 x data-parallel size 2 is past int64"},
        // Sizes no job comes near are refused before anything is built from them (a
        // virtual_pipeline of 10^9 made 10^9 stages in the controller's validation).
        Bad{"world_size: 2,", "world_size: 4294967298,",
            "spec.parallelism.world_size: 4294967298 exceeds 16777216 devices"},
        Bad{"world_size: 2,", "world_size: 2, pipeline_parallel: 2, virtual_pipeline: 1000000000,",
            "spec.parallelism.virtual_pipeline: pipeline_parallel x virtual_pipeline = 2 x "
            "1000000000 exceeds 65536 pipeline stages"},
        Bad{"world_size: 2,",
            "world_size: 2, pipeline_parallel: 2, virtual_pipeline: 9223372036854775807,",
            "exceeds 65536 pipeline stages"},
        Bad{"global_batch_size: 16", "global_batch_size: 4611686018427387904",
            "spec.data.global_batch_size: 4611686018427387904 exceeds 1099511627776 sequences"},
        Bad{"{preset: tiny}", "{preset: tiny, moe: {top_k: 9}}",
            "spec.model.moe.top_k: 9 exceeds num_experts = 8"},
        Bad{"{preset: tiny}", "{preset: tiny, moe: {topk_groups: 5}}",
            "spec.model.moe.topk_groups: 5 exceeds num_groups = 4"},
        Bad{"{preset: tiny}", "{preset: tiny, moe: {num_groups: 3}}",
            "spec.model.moe.num_groups: num_experts = 8 is not divisible by num_groups = 3"},
        Bad{"{preset: tiny}", "{preset: tiny, num_heads: 3, attention: {type: mha}}",
            "spec.model.hidden_size: 128 is not divisible by num_heads = 3"},
        Bad{"{preset: tiny}",
            "{preset: tiny, rope_scaling: {type: yarn, factor: 4, mscale: 1, mscale_all_dim: 0.7}}",
            "spec.model.rope_scaling.mscale: 1 differs from mscale_all_dim = 0.7"},
        Bad{"{preset: tiny}", "{preset: tiny, moe: {top_k: 6}}",
            "spec.model.moe.top_k: 6 exceeds the 4 experts in the topk_groups = 2 groups"},
        Bad{"{preset: tiny}", "{preset: tiny, moe: {score_function: relu}}",
            "spec.model.moe.score_function: must be sigmoid or softmax"},
        Bad{"{preset: tiny}", "{preset: tiny, first_k_dense: 9}",
            "spec.model.first_k_dense: 9 exceeds num_layers = 4"},
        Bad{"{preset: tiny}", "{preset: tiny, hidden_size: -4}",
            "spec.model.hidden_size: must be > 0"},
        Bad{"{preset: tiny}", "{preset: tiny, hidden_size: lots}",
            "spec.model.hidden_size: expected an integer, got 'lots'"},
        Bad{"expert_parallel: 2}", "expert_parallel: 3}",
            "spec.parallelism.expert_parallel: the data-parallel size world_size / "
            "pipeline_parallel = 2 is not divisible by expert_parallel = 3"},
        Bad{"global_batch_size: 16", "global_batch_size: 12",
            "spec.data.global_batch_size: 12 must be a multiple of micro_batch_size x "
            "data-parallel size (world_size / pipeline_parallel) = 16"},
        Bad{"expert_parallel: 2}", "expert_parallel: 2, pipeline_parallel: 3}",
            "spec.parallelism.pipeline_parallel: world_size = 2 is not divisible by "
            "pipeline_parallel = 3"},
        Bad{"expert_parallel: 2}", "expert_parallel: 1, virtual_pipeline: 2}",
            "spec.parallelism.virtual_pipeline: 2 model chunks per rank need pipeline_parallel > "
            "1"},
        Bad{"expert_parallel: 2}",
            "expert_parallel: 1, pipeline_parallel: 2, pipeline_layout: [Et, tmL]}",
            "spec.parallelism.pipeline_layout: holds 2 transformer blocks (t), the model has "
            "num_layers = 4"},
        Bad{"expert_parallel: 2}",
            "expert_parallel: 1, pipeline_parallel: 2, pipeline_layout: [Et, tttL]}",
            "spec.parallelism.pipeline_layout: holds 0 MTP depths (m), the model has mtp_depth = "
            "1"},
        Bad{"expert_parallel: 2}",
            "expert_parallel: 1, pipeline_parallel: 2, pipeline_layout: [Etx, tttmL]}",
            "spec.parallelism.pipeline_layout: unknown letter 'x'"},
        Bad{"expert_parallel: 2}",
            "expert_parallel: 1, pipeline_parallel: 2, pipeline_layout: [EtL, tttm]}",
            "spec.parallelism.pipeline_layout[stage 0]: L (the loss) belongs to the last stage"},
        Bad{"expert_parallel: 2}",
            "expert_parallel: 1, pipeline_parallel: 2, pipeline_layout: [Et, tmtL]}",
            "spec.parallelism.pipeline_layout[stage 1]: 'tmtL': a block after an MTP depth"},
        Bad{"expert_parallel: 2}",
            "expert_parallel: 1, pipeline_parallel: 2, pipeline_layout: [\"Et|t*2|tmL\"]}",
            "spec.parallelism.pipeline_layout: 3 stages, pipeline_parallel x virtual_pipeline = 2 "
            "x 1 = 2"},
        Bad{"world_size: 2, expert_parallel: 2}",
            "world_size: 4, expert_parallel: 2, pipeline_parallel: 2, virtual_pipeline: 2}",
            "spec.data.global_batch_size: 16 must give each pipeline a multiple of "
            "pipeline_parallel = 2 micro-batches"},
        Bad{"expert_group_within: rack", "expert_group_within: planet",
            "spec.placement.expert_group_within: must be rack, node or any"},
        Bad{"lr: 3.0e-3, min_lr: 3.0e-4", "lr: 3.0e-3, min_lr: 3.0e-2",
            "spec.optimizer.min_lr: must be in [0, lr]"},
        Bad{"device: cpu", "device: tpu", "spec.resources.device: must be cpu or cuda"},
        Bad{"interval_steps: 50}", "interval_steps: 50, async: later}",
            "spec.checkpoint.async: expected true or false, got 'later'"},
        Bad{"steps: 300", "steps: 0", "spec.training.steps: must be > 0"},
        Bad{"seed: 1234}", "seed: 1234, attention: dense}",
            "spec.training.attention: must be flash or materialized"},
        Bad{"seed: 1234}\n  checkpoint: {dir: /tmp/moe-ckpt, interval_steps: 50}\n  resources: "
            "{device: cpu}",
            "seed: 1234, attention: materialized}\n  checkpoint: {dir: /tmp/moe-ckpt, "
            "interval_steps: 50}\n  resources: {device: cuda}",
            "spec.training.attention: materialized is the CPU reference path"},
        Bad{"name: tiny-dsv3", "name: Tiny DSV3!", "metadata.name:"},
        Bad{"priority: 0}", "priority: 0, labels: {team: research, bad key: x}}",
            "metadata.labels: key 'bad key' must be [prefix/]name"},
        Bad{"priority: 0}", "priority: 0, labels: {team: -research}}",
            "metadata.labels.team: '-research' must be empty or 1-63"},
        Bad{"priority: 0}", "priority: 0, labels: {/team: x}}", "metadata.labels: key '/team'"},
        Bad{"priority: 0}", "priority: 0, labels: [team]}", "metadata.labels: expected a mapping"},
        Bad{"apiVersion: moe/v1", "apiVersion: moe/v2", "apiVersion: must be moe/v1"},
        Bad{"max_restarts: 3", "max_restarts: 3\n  surprise: 1", "spec.surprise: unknown field"},
        Bad{"data: {path: data/fortunes,", "data: {", "spec.data.path: missing"},
        Bad{"dir: /tmp/moe-ckpt", "dir: ../../../etc/x",
            "spec.checkpoint.dir: ../../../etc/x has a '..' component"},
        Bad{"dir: /tmp/moe-ckpt", "dir: ckpt/a/../../..", "spec.checkpoint.dir: ckpt/a/../../.."},
        Bad{"path: data/fortunes,", "path: data/../../secrets,",
            "spec.data.path: data/../../secrets has a '..' component"}));

TEST(JobSpec, CheckpointAsyncDefaultsToTrueAndRoundTrips) {
  auto spec = ParseJobSpecText(kJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->checkpoint.async);
  std::string text = kJob;
  text.replace(text.find("interval_steps: 50}"), 19, "interval_steps: 50, async: false}");
  auto sync = ParseJobSpecText(text);
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_FALSE(sync->checkpoint.async);
  auto again = ParseJobSpec(JobSpecToNode(*sync));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->checkpoint.async);
}

TEST(JobSpec, LabelsRoundTripAndSelectorsPickJobsByThem) {
  std::string text = kJob;
  text.replace(text.find("priority: 0}"), 12,
               "priority: 0, labels: {team: research, example.com/tier: low, spot: ''}}");
  auto spec = ParseJobSpecText(text);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::map<std::string, std::string> want = {
      {"example.com/tier", "low"}, {"spot", ""}, {"team", "research"}};
  EXPECT_EQ(spec->labels, want);
  auto again = ParseJobSpec(JobSpecToNode(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->labels, want);
  const auto matches = [&](const std::string& sel) {
    auto s = LabelSelector::Parse(sel);
    EXPECT_TRUE(s.ok()) << sel << ": " << s.status();
    return s.ok() && s->Matches(want);
  };
  EXPECT_TRUE(matches("team=research"));
  EXPECT_TRUE(matches("team==research, example.com/tier=low"));
  EXPECT_TRUE(matches("spot,!preemptible,tier!=high"));
  EXPECT_TRUE(matches(""));
  EXPECT_FALSE(matches("team=infra"));
  EXPECT_FALSE(matches("team!=research"));
  EXPECT_FALSE(matches("!spot"));
  EXPECT_FALSE(matches("owner"));
  for (const char* bad : {"team in (a,b)", "a=b,,c", "=x", "a=b=c", "!"}) {
    auto s = LabelSelector::Parse(bad, "-l");
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().message().rfind("-l: ", 0), 0u) << s.status().message();
  }
}

TEST(PathRoots, DotDotSymlinksAndComponentBoundariesCannotEscapeARoot) {
  EXPECT_EQ(NormalizeAbsolute("/ckpt/a/../b//c/.", "/x"), "/ckpt/b/c");
  EXPECT_EQ(NormalizeAbsolute("data/fortunes", "/work"), "/work/data/fortunes");
  EXPECT_EQ(NormalizeAbsolute("/../../etc", "/"), "/etc");
  EXPECT_TRUE(IsUnder("/ckpt", "/ckpt"));
  EXPECT_TRUE(IsUnder("/ckpt/j/step_1", "/ckpt"));
  EXPECT_FALSE(IsUnder("/ckpt2/j", "/ckpt")) << "a prefix that is not a component";
  EXPECT_TRUE(IsUnder("/anything", "/"));
  const std::vector<std::string> roots = {"/ckpt", "/scratch/ckpt"};
  EXPECT_TRUE(
      CheckUnderRoots("spec.checkpoint.dir", "/ckpt/job-1", roots, "checkpoint", false, "/").ok());
  EXPECT_TRUE(CheckUnderRoots("spec.checkpoint.dir", "/etc/x", {}, "checkpoint", false, "/").ok())
      << "no roots: anywhere";
  Status st =
      CheckUnderRoots("spec.checkpoint.dir", "/ckpt/../etc/x", roots, "checkpoint", false, "/");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      st.message(),
      "spec.checkpoint.dir: /ckpt/../etc/x (/etc/x) is outside this worker's checkpoint roots "
      "(/ckpt, /scratch/ckpt) (moe-worker --checkpoint-root)");
  // On disk: a link inside the root that leads out is followed; the part not created yet is kept.
  char tmpl[] = "/tmp/moe-roots-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = std::string(tmpl) + "/root", out = std::string(tmpl) + "/outside";
  ASSERT_EQ(::mkdir(root.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(out.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(out.c_str(), (root + "/link").c_str()), 0);
  EXPECT_TRUE(
      CheckUnderRoots("spec.checkpoint.dir", root + "/link/new", {root}, "checkpoint", false, "/")
          .ok())
      << "lexically inside";
  st = CheckUnderRoots("spec.checkpoint.dir", root + "/link/new", {root}, "checkpoint", true, "/");
  EXPECT_FALSE(st.ok()) << "resolved, it is outside";
  EXPECT_NE(st.message().find("(" + ResolveOnDisk(out) + "/new)"), std::string::npos)
      << st.message();
  EXPECT_TRUE(
      CheckUnderRoots("spec.checkpoint.dir", root + "/a/b/../c", {root}, "checkpoint", true, "/")
          .ok());
  EXPECT_EQ(std::system(("rm -rf " + std::string(tmpl)).c_str()), 0);
}

TEST(JobSpec, EveryPresetRoundTripsThroughTheWriter) {
  for (const std::string& preset : ModelPresetNames()) {
    std::string text = kJob;
    text.replace(text.find("{preset: tiny}"), 14, "{preset: " + preset + "}");
    auto spec = ParseJobSpecText(text);
    ASSERT_TRUE(spec.ok()) << preset << ": " << spec.status();
    EXPECT_EQ(spec->model, *ModelPreset(preset));
    const Node doc = JobSpecToNode(*spec);
    for (const std::string& written : {ToJson(doc), ToYaml(doc)}) {
      auto again = ParseJobSpecText(written);
      ASSERT_TRUE(again.ok()) << preset << ": " << again.status() << "\n" << written;
      EXPECT_EQ(*again, *spec) << preset << "\n" << written;
    }
    // Written out, every field is there: without the preset's name it is the same model and
    // fingerprint.
    Node without_preset = doc;
    without_preset.FindMutable("spec")->FindMutable("model")->Set("preset", Node::Scalar("", true));
    auto again = ParseJobSpec(without_preset);
    ASSERT_TRUE(again.ok()) << again.status();
    ModelConfig expected = spec->model;
    expected.preset = "";
    EXPECT_EQ(again->model, expected);
    EXPECT_EQ(ModelFingerprint(*again), ModelFingerprint(*spec));
  }
}

// Every leaf of the document (by walking the schema), one at a time set to -1: refused with an
// error that starts with that field's path, or accepted where any value is valid.
void Leaves(const SchemaInfo& s, const std::vector<std::string>& prefix,
            std::vector<std::vector<std::string>>* out) {
  for (const FieldInfo& f : s.fields) {
    std::vector<std::string> path = prefix;
    path.push_back(f.name);
    if (f.type->kind == TypeInfo::Kind::kStruct)
      Leaves(*f.type->fields, path, out);
    else
      out->push_back(path);
  }
}

// Optional fields the writer leaves out when absent (std::optional without a default).
const std::set<std::string> kOptionalLeaves = {
    "spec.optimizer.distributed", "spec.training.deterministic", "spec.resources.precision"};

TEST(JobSpec, EveryFieldCheckNamesItsPath) {
  auto spec = ParseJobSpecText(kJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<std::vector<std::string>> leaves;
  Leaves(SchemaOf<JobSpec>().info(), {}, &leaves);
  ASSERT_GT(leaves.size(), 50u);
  std::set<std::string> accepted;
  for (const auto& leaf : leaves) {
    Node doc = JobSpecToNode(*spec);
    Node* at = &doc;
    std::string path;
    for (size_t i = 0; i < leaf.size(); ++i) {
      const std::string& key = leaf[i];
      Node* next = at->FindMutable(key);
      if (next == nullptr && i + 1 == leaf.size() && kOptionalLeaves.count(path + "." + key)) {
        at->Set(key, Node::Scalar(""));  // absent by default: set it to check it too
        next = at->FindMutable(key);
      }
      ASSERT_NE(next, nullptr) << "the writer left out " << path << "." << key;
      at = next;
      path += (path.empty() ? "" : ".") + key;
    }
    *at = Node::Scalar("-1");
    auto bad = ParseJobSpec(doc);
    if (bad.ok()) {
      accepted.insert(path);
      continue;
    }
    EXPECT_EQ(bad.status().message().rfind(path + ": ", 0), 0u) << path << " -> " << bad.status();
  }
  // The fields that take -1: a priority, two paths, free text.
  EXPECT_EQ(accepted, (std::set<std::string>{"metadata.priority", "spec.data.path",
                                             "spec.checkpoint.dir", "metadata.comment"}));
}

// Megatron's formula (docs/reference/flops-and-models.md) written out by hand with the 671B
// model's numbers, with and without its one MTP depth, at sequence length 4096.
double V3FlopsPerTokenByHand(bool mtp) {
  const double h = 7168, n = 128, s = 4096, m = mtp ? 1 : 0;
  const double n_moe = 58 + m, n_dense = 3, n_attn = 61 + m;
  const double ffn = 6 * h * (18432 * 3 * n_dense + 2048 * 8 * 3 * n_moe + 2048 * 1 * 3 * n_moe);
  const double q_term = 1536 * (h + n * (128 + 64) + 1);
  const double proj =
      n_attn * 6 * (q_term + 512 * (h + n * (128 + 128) + 1) + h * 64 + n * 128 * h);
  const double mtp_terms = 6 * m * (3 * h + 2 * h * h);
  const double logits = 6 * h * 129280 * (m + 1);
  const double core = s * n_attn * 6 * (n * (128 + 64) / 2 + n * 128 / 2);  // sqsum / tokens = s
  return ffn + proj + mtp_terms + logits + core;
}

TEST(Flops, PinsDeepSeekV3WithAndWithoutMtp) {
  const ModelConfig v3 = *ModelPreset("deepseek-v3-671b");
  const double with_mtp = MegatronFlopsPerStep(v3, 1, 4096) / 4096;
  EXPECT_DOUBLE_EQ(with_mtp, V3FlopsPerTokenByHand(true));
  ModelConfig no_mtp = v3;
  no_mtp.mtp_depth = 0;
  const double without = MegatronFlopsPerStep(no_mtp, 1, 4096) / 4096;
  EXPECT_DOUBLE_EQ(without, V3FlopsPerTokenByHand(false));
  // About 2.5e11 without MTP (Megatron-Bridge's tables); the pinned figures themselves:
  EXPECT_NEAR(without, 2.5e11, 0.1e11);
  EXPECT_NEAR(without, 2.4981e11, 0.0001e11) << without;
  EXPECT_NEAR(with_mtp, 2.5999e11, 0.0001e11) << with_mtp;
}

// A model with MTP depths whose loss weight is 0 throughout does not train them: no FLOPs for them.
TEST(Flops, MtpCountsOnlyWhenItTrains) {
  ModelConfig v3 = *ModelPreset("deepseek-v3-671b");
  ModelConfig off = v3;
  off.mtp_depth = 0;
  ModelConfig idle = v3;
  idle.mtp_loss_weight = 0;
  idle.mtp_loss_weight_schedule.clear();
  EXPECT_FALSE(idle.MtpTrains());
  EXPECT_TRUE(v3.MtpTrains());
  EXPECT_EQ(MegatronFlopsPerStep(idle, 2, 4096), MegatronFlopsPerStep(off, 2, 4096));
  EXPECT_GT(MegatronFlopsPerStep(v3, 2, 4096), MegatronFlopsPerStep(off, 2, 4096));
}

TEST(Flops, ByHandForTiny) {
  // tiny: h 128, 4 layers (1 dense), V 2048, MLA (q LoRA 64, kv 32, nope 32, rope 16, v 32, 4
  // heads), one MTP depth (a MoE block), s 256, one sequence.
  const ModelConfig t = *ModelPreset("tiny");
  const double h = 128, s = 256, n = 4, n_moe = 3 + 1, n_attn = 4 + 1;
  const double ffn = 6 * h * (384 * 3 * 1 + 128 * 2 * 3 * n_moe + 128 * 1 * 3 * n_moe);
  const double proj =
      n_attn * 6 *
      (64 * (h + n * (32 + 16) + 1) + 32 * (h + n * (32 + 32) + 1) + h * 16 + n * 32 * h);
  const double expected = s * (ffn + proj + 6 * 1 * (3 * h + 2 * h * h) + 6 * h * 2048 * 2) +
                          s * s * n_attn * 6 * (n * (32 + 16) / 2 + n * 32 / 2);
  EXPECT_DOUBLE_EQ(MegatronFlopsPerStep(t, 1, 256), expected);
  EXPECT_DOUBLE_EQ(TflopsPerDevice(2e12, 2.0, 4), 0.25);
  EXPECT_EQ(PaddedVocab(129280), 129280);
  EXPECT_EQ(PaddedVocab(2049), 2176);
}

}  // namespace
}  // namespace moe
