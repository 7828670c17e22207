// moectl plan's model against the published DeepSeek-V3 runs (docs/reference/
// gpu-clusters-and-published-runs.md): the calibration table of docs/planning.md, the GB200 guide's
// ladder explained by switches, placement, the sweep, and bad profiles.
#include "planner/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace moe {
namespace {

JobSpec Job671(int64_t world, int64_t pp, int64_t vpp, int64_t ep, int64_t gbs) {
  JobSpec s;
  s.name = "dsv3";
  s.model = *ModelPreset("deepseek-v3-671b");
  s.model.preset = "deepseek-v3-671b";
  s.parallelism.world_size = world;
  s.parallelism.pipeline_parallel = pp;
  s.parallelism.virtual_pipeline = vpp;
  s.parallelism.expert_parallel = ep;
  s.data.path = "data/fortunes";
  s.data.seq_length = 4096;
  s.data.micro_batch_size = 1;
  s.data.global_batch_size = gbs;
  s.resources.device = "cuda";
  s.resources.precision = "fp8";
  return s;
}

Plan Predict(const JobSpec& spec, const std::string& cluster, const std::string& software,
             const std::vector<std::string>& switches = {}, PlanOptions o = {}) {
  auto c = LoadClusterProfile(cluster);
  auto s = LoadSoftwareProfile(software);
  EXPECT_TRUE(c.ok() && s.ok()) << c.status().ToString() << " " << s.status().ToString();
  for (const auto& w : switches) EXPECT_TRUE(ApplySoftwareOverride(&*s, w).ok()) << w;
  auto p = PlanJob(spec, *c, *s, o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : Plan{};
}

void ExpectWithin(double predicted, double published, double tolerance, const std::string& what) {
  const double ratio = predicted / published;
  std::printf("calibration: %-52s predicted %6.0f  published %6.0f  ratio %.2f\n", what.c_str(),
              predicted, published, ratio);
  EXPECT_NEAR(ratio, 1.0, tolerance) << what;
}

// The guide's optimised GB200 run: TP1 PP8 VPP4 EP32, MBS1 GBS2048, seq 4096, MXFP8, recompute mlp.
TEST(PlannerCalibration, Gb200GuideOptimisedAndBaseline) {
  JobSpec spec = Job671(256, 8, 4, 32, 2048);
  spec.training.recompute = {"mlp"};
  const Plan opt = Predict(spec, "gb200-nvl72", "megatron-2025-11");
  ExpectWithin(opt.tflops_per_gpu, 970, 0.15, "GB200 NVL72, megatron-2025-11 (optimised)");
  // The guide's baseline: the same stack with its first switches undone, and nothing else.
  spec.training.recompute = {"mlp", "mla_up_proj"};
  const std::vector<std::string> baseline = {"dispatcher=nccl", "host.cuda_graphs=[]", "fusions=[]",
                                             "host.launch_us=20"};
  const Plan base = Predict(spec, "gb200-nvl72", "megatron-2025-11", baseline);
  ExpectWithin(base.tflops_per_gpu, 494, 0.15, "GB200 NVL72, the guide's baseline switches");
  // Each switch on its own moves the figure the way the ladder did.
  for (const std::string& one : baseline) {
    spec.training.recompute = {"mlp"};
    const Plan p = Predict(spec, "gb200-nvl72", "megatron-2025-11", {one});
    EXPECT_LT(p.tflops_per_gpu, opt.tflops_per_gpu) << one;
  }
  spec.training.recompute = {"mlp", "mla_up_proj"};
  EXPECT_LT(Predict(spec, "gb200-nvl72", "megatron-2025-11").tflops_per_gpu, opt.tflops_per_gpu);
}

TEST(PlannerCalibration, Gb300Record) {
  const Plan p = Predict(Job671(256, 2, 8, 32, 2048), "gb300-nvl72", "megatron-2026");
  ExpectWithin(p.tflops_per_gpu, 1648, 0.15, "GB300 NVL72, megatron-2026 (the record)");
}

// DeepSeek's own run: 2,048 H800, PP16 (DualPipe), EP64 over 8 nodes, FP8, batch 15,360; the last
// stage holds MTP and the head only, the first one more block (a balanced layout).
TEST(PlannerCalibration, DeepSeekH800) {
  JobSpec spec = Job671(2048, 16, 1, 64, 15360);
  spec.parallelism.pipeline_layout = {"Et*5|(t*4|)*14mL"};
  spec.training.recompute = {"mla_up_proj"};
  spec.optimizer.moments_dtype = "bf16";
  const Plan p = Predict(spec, "h800", "deepseek-h800");
  EXPECT_EQ(p.ep_domains, 8);
  ExpectWithin(p.tflops_per_gpu, 400, 0.20, "H800, deepseek-h800 (DeepSeek-V3 report, derived)");
}

TEST(Planner, AnExpertGroupAcrossTwoRacksIsSlowerAndSaysWhy) {
  const JobSpec spec = Job671(256, 2, 8, 32, 2048);
  const Plan packed = Predict(spec, "gb300-nvl72", "megatron-2026");
  PlanOptions split;
  split.ep_domains = 2;
  const Plan spread = Predict(spec, "gb300-nvl72", "megatron-2026", {}, split);
  EXPECT_EQ(packed.ep_domains, 1);
  EXPECT_LT(spread.tflops_per_gpu, 0.95 * packed.tflops_per_gpu);
  ASSERT_NE(packed.Find("all-to-all across domains"), nullptr);
  EXPECT_EQ(packed.Find("all-to-all across domains")->seconds, 0);
  EXPECT_GT(spread.Find("all-to-all across domains")->seconds, 0.1);
  EXPECT_LT(spread.Find("all-to-all in domain")->seconds,
            packed.Find("all-to-all in domain")->seconds);
}

// The in-domain all-to-all is priced on the cluster's own scale-up link: the same layout, each
// expert-parallel group inside one domain on both, takes as much longer on H100 (NVLink 4, 450 GB/s
// a direction) than on GB300 NVL72 (NVLink 5, 900 GB/s) as its link is slower.
TEST(Planner, InDomainAllToAllFollowsTheClustersLinks) {
  const ClusterProfile gb300 = *LoadClusterProfile("gb300-nvl72"),
                       h100 = *LoadClusterProfile("h100");
  const double links = gb300.scale_up_gbps / h100.scale_up_gbps;
  ASSERT_GT(links, 1.5);
  JobSpec eight = Job671(256, 8, 4, 8, 2048);  // EP 8: one HGX node, or a ninth of an NVL72
  eight.resources.precision = "bf16";
  const Plan a = Predict(eight, "gb300-nvl72", "ours"), b = Predict(eight, "h100", "ours");
  ASSERT_EQ(a.ep_domains, 1);
  ASSERT_EQ(b.ep_domains, 1);
  const double in_a = a.Find("all-to-all in domain")->seconds;
  const double in_b = b.Find("all-to-all in domain")->seconds;
  ASSERT_GT(in_a, 0);
  EXPECT_NEAR(in_b / in_a, links, 1e-9 * links);
  // The bandwidth comes from the profile: halve it and the in-domain time doubles.
  ClusterProfile slow = gb300;
  slow.scale_up_gbps /= 2;
  auto sw = *LoadSoftwareProfile("ours");
  auto half = PlanJob(eight, slow, sw, {});
  ASSERT_TRUE(half.ok());
  EXPECT_NEAR(half->Find("all-to-all in domain")->seconds / in_a, 2, 1e-9);
  // The 671B example's layout (EP 32): one NVL72 rack, or four HGX nodes whose NVLink also forwards
  // the bytes bound for the other three (the hop hierarchical all-to-alls take). The in-domain time
  // still differs by about the links' ratio, less the share that goes straight over the network.
  JobSpec ex = Job671(256, 8, 4, 32, 15360);
  ex.resources.precision.reset();
  const Plan g = Predict(ex, "gb300-nvl72", "ours"), h = Predict(ex, "h100", "ours");
  EXPECT_EQ(g.ep_domains, 1);
  EXPECT_EQ(h.ep_domains, 4);
  const double ratio =
      h.Find("all-to-all in domain")->seconds / g.Find("all-to-all in domain")->seconds;
  std::printf(
      "all-to-all in domain, EP32: gb300-nvl72 %.3f s, h100 %.3f s (ratio %.3f, links %.2f)\n",
      g.Find("all-to-all in domain")->seconds, h.Find("all-to-all in domain")->seconds, ratio,
      links);
  EXPECT_GT(ratio, 0.8 * links);
  EXPECT_LE(ratio, links * (1 + 1e-9));
  EXPECT_GT(h.Find("all-to-all across domains")->seconds, 0);
}

// Tensor parallelism, a planner layout (the job spec has none): TP splits the dense weights and the
// activations, not the routed experts (EP does), multiplies the micro-batches, pays its collectives
// on the domain's link, and says whether the software's stack can run it.
TEST(Planner, TensorParallelSplitsDenseMemoryAndPaysItsCollectives) {
  JobSpec spec = Job671(256, 8, 1, 32, 2048);
  spec.resources.precision = "bf16";
  PlanOptions tp2;
  tp2.tensor_parallel = 2;
  const Plan one = Predict(spec, "h100", "ours"), two = Predict(spec, "h100", "ours", {}, tp2);
  EXPECT_EQ(one.layout.rfind("TP1 PP8 VPP1 EP32 DP32", 0), 0u) << one.layout;
  EXPECT_EQ(two.layout.rfind("TP2 PP8 VPP1 EP32 DP16", 0), 0u) << two.layout;
  EXPECT_EQ(two.micro_batches, 2 * one.micro_batches);
  for (size_t r = 0; r < one.memory.stages.size(); ++r) {
    const StageMemory &a = one.memory.stages[r], &b = two.memory.stages[r];
    EXPECT_DOUBLE_EQ(b.expert_params, a.expert_params) << r;
    EXPECT_NEAR(b.params - b.expert_params, (a.params - a.expert_params) / 2, 1) << r;
    EXPECT_NEAR(b.activations_per_micro_batch, a.activations_per_micro_batch / 2, 1) << r;
    EXPECT_LT(b.peak(), a.peak()) << r;
  }
  EXPECT_EQ(one.Find("tensor-parallel collectives"), nullptr);
  ASSERT_NE(two.Find("tensor-parallel collectives"), nullptr);
  EXPECT_GT(two.Find("tensor-parallel collectives")->seconds, 0);
  // The same FLOPs per rank: the dense GEMMs take as long (half the tokens, twice the
  // micro-batches).
  EXPECT_NEAR(two.Find("dense GEMMs")->seconds, one.Find("dense GEMMs")->seconds,
              1e-9 * one.Find("dense GEMMs")->seconds);
  // Who runs it: not this engine (it says so), Megatron-Core does.
  EXPECT_TRUE(one.runnable);
  EXPECT_EQ(one.tp_note, "");
  EXPECT_FALSE(two.runnable);
  EXPECT_NE(two.tp_note.find("does not run"), std::string::npos) << two.tp_note;
  EXPECT_NE(two.tp_note.find("no tensor_parallel field"), std::string::npos) << two.tp_note;
  EXPECT_NE(PlanTable(two).find("tensor parallelism: needs tensor parallelism (TP2)"),
            std::string::npos);
  const Plan meg = Predict(spec, "h100", "megatron-2026", {}, tp2);
  EXPECT_TRUE(meg.runnable);
  EXPECT_NE(meg.tp_note.find("as megatron-2026 runs it"), std::string::npos) << meg.tp_note;
  // Refused: TP that does not divide the heads, or leaves the scale-up domain.
  auto c = *LoadClusterProfile("h100");
  auto sw = *LoadSoftwareProfile("ours");
  for (int64_t bad : {3, 16}) {
    PlanOptions o;
    o.tensor_parallel = bad;
    auto p = PlanJob(spec, c, sw, o);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find("--tensor-parallel"), std::string::npos)
        << p.status().message();
  }
}

TEST(Planner, SweepRanksLayoutsThatFitFirstAndNamesWhatOverflows) {
  auto c = LoadClusterProfile("gb300-nvl72");
  auto s = LoadSoftwareProfile("megatron-2026");
  ASSERT_TRUE(c.ok() && s.ok());
  auto plans = SweepLayouts(Job671(256, 2, 8, 32, 2048), *c, *s, {}, 100000);
  ASSERT_TRUE(plans.ok()) << plans.status().ToString();
  ASSERT_GT(plans->size(), 10u);
  EXPECT_TRUE(plans->front().fits);
  bool saw_overflow = false;
  for (size_t i = 1; i < plans->size(); ++i) {
    const Plan& a = (*plans)[i - 1];
    const Plan& b = (*plans)[i];
    EXPECT_TRUE(a.fits >= b.fits);
    if (a.fits == b.fits) {
      EXPECT_GE(a.tflops_per_gpu, b.tflops_per_gpu);
    }
    if (!b.fits) {
      saw_overflow = true;
      EXPECT_NE(b.memory_verdict.find("overflow"), std::string::npos) << b.memory_verdict;
    }
  }
  EXPECT_TRUE(saw_overflow) << "PP1 with no recompute cannot hold the 671B model on 279 GB";
}

TEST(Planner, MemoryIsTheEnginesAccounting) {
  JobSpec spec = Job671(256, 8, 4, 32, 2048);
  spec.resources.precision.reset();
  const Plan p = Predict(spec, "gb200-nvl72", "megatron-2025-11");
  // The job as that stack runs it: its bf16 moments, and its recompute where the job names none.
  JobSpec as_run = spec;
  as_run.optimizer.moments_dtype = "bf16";
  if (as_run.training.recompute.empty()) as_run.training.recompute = {"moe_act", "mlp"};
  auto m = EstimateMemory(as_run, 2);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(p.memory.largest().peak(), m->largest().peak());
  EXPECT_EQ(p.fits, m->largest().peak() <= 186e9);
}

// A software profile's memory habits fill what the job leaves open, and say so; a job's own choice
// stands. Under fp8 a Transformer Engine stack saves its GEMM inputs quantized: less memory.
TEST(Planner, SoftwareHabitsFillOnlyWhatTheJobLeavesOpen) {
  JobSpec open = Job671(256, 2, 8, 32, 2048);
  open.parallelism.virtual_pipeline = 8;
  open.training.recompute.clear();
  open.optimizer.moments_dtype = "fp32";
  const Plan filled = Predict(open, "gb300-nvl72", "megatron-2026");
  EXPECT_NE(filled.habits.find("recompute moe_act+mlp"), std::string::npos) << filled.habits;
  EXPECT_NE(filled.habits.find("moments in bf16"), std::string::npos) << filled.habits;
  EXPECT_EQ(filled.recompute, "moe_act+mlp");
  JobSpec own = open;
  own.training.recompute = {"mla_up_proj"};
  const Plan kept = Predict(own, "gb300-nvl72", "megatron-2026");
  EXPECT_EQ(kept.recompute, "mla_up_proj");
  EXPECT_EQ(kept.habits.find("recompute"), std::string::npos) << kept.habits;
  // Our own stack has no habits: the job is planned as written.
  EXPECT_EQ(Predict(open, "gb300-nvl72", "ours").habits, "");
  // fp8 saved inputs: the same job in bf16 keeps more activations per micro-batch.
  JobSpec bf16 = open;
  bf16.resources.precision = "bf16";
  const Plan b = Predict(bf16, "gb300-nvl72", "megatron-2026");
  EXPECT_LT(filled.memory.largest().activations_per_micro_batch,
            b.memory.largest().activations_per_micro_batch);
}

// A CPU machine as moe-probe prints it: 2 cores at 200 GFLOP/s, 40 GB/s, 20 GB.
ClusterProfile Machine() {
  ClusterProfile c;
  c.name = "local", c.device = "cpu", c.peak_bf16_tflops = 0.2, c.memory_gb = 20,
  c.memory_tbps = 0.04;
  c.scale_up_gbps = c.scale_out_gbps = 40, c.domain_size = 2;
  return c;
}

JobSpec SmallCpu(int64_t world) {
  JobSpec s;
  s.name = "small";
  s.model = *ModelPreset("small");
  s.parallelism.world_size = world;
  s.parallelism.expert_parallel = world;
  s.data.source = "synthetic";
  s.data.seq_length = 512;
  s.data.micro_batch_size = 2;
  s.data.global_batch_size = 4;
  return s;
}

// Where no layout of a size fits without it, the sweep lists TP layouts; under a stack that runs no
// TP they come after the layouts it runs, marked. A CPU cluster gets none.
TEST(Planner, SweepOffersTensorParallelWhereMemoryNeedsIt) {
  auto c = *LoadClusterProfile("h100");
  auto sw = *LoadSoftwareProfile("ours");
  JobSpec spec = Job671(256, 8, 4, 32, 15360);
  spec.resources.precision.reset();
  auto plans = SweepLayouts(spec, c, sw, {}, 100000);
  ASSERT_TRUE(plans.ok()) << plans.status().ToString();
  size_t with_tp = 0, fitting_tp = 0;
  bool past_runnable = false;
  for (const Plan& p : *plans) {
    if (p.tensor_parallel > 1) {
      ++with_tp;
      fitting_tp += p.fits ? 1 : 0;
      EXPECT_FALSE(p.runnable);
      EXPECT_LE(p.tensor_parallel, c.domain_size);
    }
    if (p.fits && !p.runnable) past_runnable = true;
    if (p.fits && p.runnable) {
      EXPECT_FALSE(past_runnable) << p.layout;
    }
  }
  EXPECT_GT(with_tp, 0u);
  EXPECT_GT(fitting_tp, 0u) << "80 GB holds the 671B model at some TP layout of 256 H100s";
  EXPECT_NE(SweepTable(*plans).find("needs TP: ours runs none"), std::string::npos);
  auto cpu = SweepLayouts(SmallCpu(2), LocalProfileForRanks(Machine(), 2),
                          *LoadSoftwareProfile("ours-cpu"), {}, 100000);
  ASSERT_TRUE(cpu.ok());
  for (const Plan& p : *cpu) EXPECT_EQ(p.tensor_parallel, 1) << p.layout;
}

// The plan says which peak its MFU is against, and a live job's own peak (what the run's MFU
// counts against) is used beside it.
TEST(Planner, MfuIsStatedAgainstThePeakTheRunUses) {
  const Plan gpu = Predict(Job671(256, 2, 8, 32, 2048), "gb300-nvl72", "megatron-2026");
  EXPECT_EQ(gpu.peak_tflops, 2500);
  EXPECT_NE(gpu.peak_source.find("datasheet"), std::string::npos) << gpu.peak_source;
  EXPECT_NE(gpu.run_peak_note.find("cuBLAS"), std::string::npos) << gpu.run_peak_note;
  EXPECT_NE(PlanTable(gpu).find("mfu peak: 2500 TFLOP/s"), std::string::npos);
  auto sw = *LoadSoftwareProfile("ours-cpu");
  ClusterProfile machine = Machine();
  machine.sources = {"moe-probe, today: SGEMM probe 1024^3, OpenBLAS, 2 threads"};
  const ClusterProfile rank = LocalProfileForRanks(machine, 2);
  auto off = PlanJob(SmallCpu(2), rank, sw, {});
  ASSERT_TRUE(off.ok());
  EXPECT_DOUBLE_EQ(off->peak_tflops, rank.peak_bf16_tflops);
  EXPECT_NE(off->peak_source.find("SGEMM probe 1024^3"), std::string::npos) << off->peak_source;
  EXPECT_NE(off->run_peak_note.find("--peak-cache"), std::string::npos) << off->run_peak_note;
  PlanOptions live;
  live.run_mfu = RunMfu{0.15, "SGEMM probe 1024^3, OpenBLAS, 1 threads", 0.04, 0.04 / 0.15};
  auto on = PlanJob(SmallCpu(2), rank, sw, live);
  ASSERT_TRUE(on.ok());
  ASSERT_TRUE(on->run_mfu.has_value());
  EXPECT_DOUBLE_EQ(on->mfu_run_peak, on->tflops_per_gpu / 0.15);
  EXPECT_DOUBLE_EQ(on->mfu_bf16, off->mfu_bf16);  // the profile's peak is still stated beside it
  const std::string table = PlanTable(*on);
  EXPECT_NE(table.find("of the run's own peak"), std::string::npos) << table;
  EXPECT_NE(table.find("the run counts its MFU against 0.15 TFLOP/s (SGEMM probe"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("measured 0.04 TFLOP/s, MFU 26.7%"), std::string::npos) << table;
}

TEST(PlannerLocal, ARankGetsItsShareOfTheMachine) {
  const ClusterProfile one = LocalProfileForRanks(Machine(), 1);
  EXPECT_EQ(one.peak_bf16_tflops, 0.2);
  const ClusterProfile two = LocalProfileForRanks(Machine(), 2);
  EXPECT_DOUBLE_EQ(two.peak_bf16_tflops, 0.1);
  EXPECT_DOUBLE_EQ(two.memory_tbps, 0.02);
  EXPECT_DOUBLE_EQ(two.memory_gb, 10);
  const ClusterProfile four =
      LocalProfileForRanks(Machine(), 4);  // still a thread each: over-subscribed
  EXPECT_DOUBLE_EQ(four.peak_bf16_tflops, 0.1);
  EXPECT_EQ(four.domain_size, 4);
  EXPECT_NE(two.description.find("2 ranks with 1 thread(s)"), std::string::npos) << two.description;
}

TEST(PlannerLocal, CpuJobsPayGlooExactSumsAndTheBusiestExpertRank) {
  auto sw = LoadSoftwareProfile("ours-cpu");
  ASSERT_TRUE(sw.ok()) << sw.status().ToString();
  EXPECT_EQ(sw->dispatcher, "gloo");
  auto w1 = PlanJob(SmallCpu(1), LocalProfileForRanks(Machine(), 1), *sw, {});
  auto w2 = PlanJob(SmallCpu(2), LocalProfileForRanks(Machine(), 2), *sw, {});
  ASSERT_TRUE(w1.ok() && w2.ok()) << w1.status().ToString() << w2.status().ToString();
  EXPECT_EQ(w1->precision, "fp32");
  EXPECT_EQ(w1->Find("data-parallel grads + weights"), nullptr);
  ASSERT_NE(w2->Find("data-parallel grads + weights"), nullptr);
  EXPECT_GT(w2->Find("all-to-all in domain")->seconds, 0);
  EXPECT_NE(w2->Find("all-to-all in domain")->detail.find("gloo"), std::string::npos);
  // training.deterministic (the CPU default) reduces f64 gradients: 8 + 4 bytes against 4 + 4.
  JobSpec fast = SmallCpu(2);
  fast.training.deterministic = false;
  auto w2f = PlanJob(fast, LocalProfileForRanks(Machine(), 2), *sw, {});
  ASSERT_TRUE(w2f.ok());
  EXPECT_NEAR(w2->Find("data-parallel grads + weights")->seconds /
                  w2f->Find("data-parallel grads + weights")->seconds,
              1.5, 1e-9);
  // The busiest expert-parallel rank sets the pace: experts scale with the imbalance, only under
  // EP.
  SoftwareProfile balanced = *sw;
  ASSERT_TRUE(ApplySoftwareOverride(&balanced, "expert_imbalance=1").ok());
  auto w2b = PlanJob(SmallCpu(2), LocalProfileForRanks(Machine(), 2), balanced, {});
  ASSERT_TRUE(w2b.ok());
  EXPECT_NEAR(w2->Find("routed experts")->seconds / w2b->Find("routed experts")->seconds,
              sw->expert_imbalance, 1e-9);
  EXPECT_FALSE(ApplySoftwareOverride(&balanced, "expert_imbalance=0.5").ok());
}

TEST(PlannerProfiles, EveryBuiltInParses) {
  EXPECT_GE(BuiltinClusterNames().size(), 6u);
  for (const auto& n : BuiltinClusterNames()) EXPECT_TRUE(LoadClusterProfile(n).ok()) << n;
  for (const auto& n : {"ours", "ours-cpu", "megatron-2025-11", "megatron-2026", "deepseek-h800"}) {
    auto s = LoadSoftwareProfile(n);
    ASSERT_TRUE(s.ok()) << n << ": " << s.status().ToString();
    EXPECT_EQ(s->name, n);
  }
}

TEST(PlannerProfiles, BadInputNamesTheField) {
  auto doc = ParseYaml("name: x\nbase: megatron-2025-11\ngemm_efficiency: 1.5\n");
  ASSERT_TRUE(doc.ok());
  auto s = ParseSoftwareProfile(*doc, "x.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("gemm_efficiency"), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("x.yaml"), std::string::npos);
  auto sw = *LoadSoftwareProfile("ours");
  Status st = ApplySoftwareOverride(&sw, "dispatcher=carrier-pigeon");
  EXPECT_NE(st.message().find("dispatcher"), std::string::npos) << st.message();
  EXPECT_FALSE(LoadClusterProfile("gb200").ok());
  EXPECT_NE(LoadClusterProfile("gb200").status().message().find("gb200-nvl72"), std::string::npos);
  PlanOptions o;
  o.racks = 2;  // 2 x 72 < 256
  auto c = *LoadClusterProfile("gb300-nvl72");
  auto p = PlanJob(Job671(256, 2, 8, 32, 2048), c, sw, o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--racks"), std::string::npos);
}

TEST(PlannerProfiles, SetOverridesAJobDocument) {
  auto doc = ParseYaml("spec: {parallelism: {world_size: 8}}");
  ASSERT_TRUE(doc.ok());
  ASSERT_TRUE(ApplyDocumentOverride(&*doc, "spec.parallelism.expert_parallel=4").ok());
  ASSERT_TRUE(ApplyDocumentOverride(&*doc, "spec.training.recompute=[mlp, full]").ok());
  EXPECT_EQ(doc->Find("spec")->Find("parallelism")->Find("expert_parallel")->scalar(), "4");
  EXPECT_EQ(doc->Find("spec")->Find("training")->Find("recompute")->elements().size(), 2u);
  EXPECT_FALSE(ApplyDocumentOverride(&*doc, "no-equals-sign").ok());
}

// Checkpoint advice (docs/planning.md, "Checkpoint advice"): Young's interval on known numbers.
TEST(PlannerCheckpoint, YoungDalyIntervalAndGoodputOnKnownNumbers) {
  EXPECT_NEAR(YoungDalyInterval(10, 20000), 632.4555, 1e-3);  // sqrt(2 x 10 x 20000)
  EXPECT_NEAR(YoungDalyInterval(2, 3600), 120, 1e-9);
  EXPECT_EQ(YoungDalyInterval(0, 3600), 0);
  CheckpointAdvice a;
  a.stall_seconds = 10, a.interval_seconds = 600, a.restart_seconds = 300,
  a.system_mtbf_seconds = 20000;
  PredictGoodput(&a);
  EXPECT_NEAR(a.stall_share, 10.0 / 600, 1e-12);
  EXPECT_NEAR(a.redo_share, 300.0 / 20000, 1e-12);
  EXPECT_NEAR(a.restart_share, 300.0 / 20000, 1e-12);
  EXPECT_NEAR(a.goodput, 1 - 10.0 / 600 - 0.015 - 0.015, 1e-12);
  EXPECT_TRUE(a.progress);
  a.persist_seconds = 100;  // an async save's write: a failure in it loses the interval before too
  PredictGoodput(&a);
  EXPECT_NEAR(a.redo_share, 400.0 / 20000, 1e-12);
  a.restart_seconds = 25000;  // restarts outlast the time between failures
  PredictGoodput(&a);
  EXPECT_FALSE(a.progress);
  EXPECT_EQ(a.goodput, 0);
}

Plan PlanAt(int64_t gpus, double mtbf_hours, bool async = true) {
  JobSpec base = Job671(256, 8, 4, 32, 15360);
  base.training.recompute = {"mlp", "mla_up_proj"};
  base.optimizer.moments_dtype = "bf16";
  base.training.steps = 1100000;
  std::string note;
  auto spec = ScaleToGpus(base, gpus, /*scale_batch=*/true, &note);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return Plan{};
  PlanOptions o;
  o.mtbf_hours = mtbf_hours, o.async_checkpoint = async;
  return Predict(*spec, "gb300-nvl72", "ours", {}, o);
}

TEST(PlannerCheckpoint, TheAdviceIsYoungDalyOnThePlansStepAndTheProfile) {
  const Plan p = PlanAt(16384, 50000);
  ASSERT_TRUE(p.checkpoint.has_value());
  const CheckpointAdvice& a = *p.checkpoint;
  auto c = *LoadClusterProfile("gb300-nvl72");
  EXPECT_EQ(a.gpus, 16384);
  EXPECT_NEAR(a.system_mtbf_seconds, 50000.0 * 3600 / 16384, 1e-6);
  EXPECT_GT(a.bytes_per_gpu, 0);
  EXPECT_NEAR(a.stall_seconds, a.bytes_per_gpu / (c.host_copy_gbps * 1e9), 1e-12);
  EXPECT_NEAR(a.persist_seconds, a.bytes_per_gpu / (c.checkpoint_write_gbps * 1e9), 1e-9);
  EXPECT_NEAR(a.restart_seconds,
              c.restart_seconds + a.bytes_per_gpu / (c.checkpoint_read_gbps * 1e9), 1e-9);
  EXPECT_NEAR(a.young_daly_seconds, std::sqrt(2 * a.stall_seconds * a.system_mtbf_seconds), 1e-9);
  EXPECT_NEAR(a.step_seconds, p.step_seconds, 1e-9);
  const double want = std::max({1.0, std::round(a.young_daly_seconds / a.step_seconds),
                                std::ceil(a.persist_seconds / a.step_seconds)});
  EXPECT_EQ(a.interval_steps, static_cast<int64_t>(want));
  EXPECT_GT(a.goodput, 0.5);
  EXPECT_LT(a.goodput, 1);
  // A synchronous save stalls for the write to storage, so its interval is longer and the goodput
  // lower.
  const Plan sync = PlanAt(16384, 50000, false);
  ASSERT_TRUE(sync.checkpoint.has_value());
  EXPECT_NEAR(sync.checkpoint->stall_seconds, a.persist_seconds, 1e-9);
  EXPECT_EQ(sync.checkpoint->persist_seconds, 0);
  EXPECT_GE(sync.checkpoint->interval_steps, a.interval_steps);
  EXPECT_LT(sync.checkpoint->goodput, a.goodput);
  // A bigger checkpoint shard (fewer replicas to share it) stalls longer.
  EXPECT_GT(PlanAt(1024, 50000).checkpoint->bytes_per_gpu, a.bytes_per_gpu);
  // No --mtbf-hours, no advice.
  PlanOptions none;
  EXPECT_FALSE(Predict(Job671(256, 8, 4, 32, 2048), "gb300-nvl72", "ours", {}, none).checkpoint);
}

TEST(PlannerCheckpoint, GoodputFallsAsTheJobGrows) {
  double last = 2;
  for (int64_t gpus : {1024, 16384, 100096, 262144}) {
    const Plan p = PlanAt(gpus, 50000);
    ASSERT_TRUE(p.checkpoint.has_value()) << gpus;
    std::printf("checkpoint: %6lld GPUs: every %lld steps, goodput %.3f\n",
                static_cast<long long>(gpus), static_cast<long long>(p.checkpoint->interval_steps),
                p.checkpoint->goodput);
    EXPECT_LT(p.checkpoint->goodput, last) << gpus;
    last = p.checkpoint->goodput;
  }
  // One failure every few seconds: a 600 s restart never finishes.
  const Plan hopeless = PlanAt(16384, 1);
  ASSERT_TRUE(hopeless.checkpoint.has_value());
  EXPECT_FALSE(hopeless.checkpoint->progress);
  EXPECT_EQ(hopeless.checkpoint->goodput, 0);
  EXPECT_NE(PlanTable(hopeless).find("cannot make progress"), std::string::npos);
}

TEST(PlannerCheckpoint, ScalingKeepsTheLayoutAndTheBatchPerReplica) {
  const JobSpec base = Job671(256, 8, 4, 32, 15360);
  std::string note;
  auto s = ScaleToGpus(base, 16384, /*scale_batch=*/true, &note);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->parallelism.world_size, 16384);
  EXPECT_EQ(s->parallelism.pipeline_parallel, 8);
  EXPECT_EQ(s->parallelism.expert_parallel, 32);
  EXPECT_EQ(s->parallelism.data_parallel(), 2048);
  EXPECT_EQ(s->data.global_batch_size / s->parallelism.data_parallel(), 15360 / 32);
  EXPECT_EQ(s->micro_batches_per_rank(), base.micro_batches_per_rank());
  EXPECT_NE(note.find("2048"), std::string::npos) << note;
}

// --gpus keeps the job's global batch (an elastic resize keeps it too): exactly where the layout
// runs it, else the nearest it runs, with the sizes that keep it; --scale-batch keeps the batch per
// replica instead. Steps follow to train the same tokens, and a ramp that cannot run is dropped,
// said.
TEST(PlannerCheckpoint, GpusKeepTheGlobalBatchUnlessAskedToScaleIt) {
  JobSpec base = Job671(256, 8, 4, 32, 15360);
  base.training.steps = 1000;
  std::string note;
  auto kept = ScaleToGpus(base, 2560, false, &note);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->parallelism.world_size, 2560);
  EXPECT_EQ(kept->data.global_batch_size, 15360);
  EXPECT_EQ(kept->training.steps, 1000);
  EXPECT_NE(note.find("global batch 15360 sequences kept"), std::string::npos) << note;
  EXPECT_NE(note.find("--scale-batch"), std::string::npos) << note;
  // 2048 GPUs (DP 256) interleave rounds of 8 x 256 sequences: 15360 is 7.5 of them.
  auto near = ScaleToGpus(base, 2048, false, &note);
  ASSERT_TRUE(near.ok()) << near.status().ToString();
  EXPECT_EQ(near->data.global_batch_size, 16384);
  EXPECT_NE(note.find("1536 and 2560 GPUs keep 15360"), std::string::npos) << note;
  EXPECT_GE(near->TokensAfter(near->training.steps), base.TokensAfter(base.training.steps));
  EXPECT_LT(near->TokensAfter(near->training.steps - 1), base.TokensAfter(base.training.steps));
  auto scaled = ScaleToGpus(base, 2048, true, &note);
  ASSERT_TRUE(scaled.ok()) << scaled.status().ToString();
  EXPECT_EQ(scaled->data.global_batch_size, 15360 * 8);
  EXPECT_EQ(scaled->training.steps, 125);
  // The example's ramp (3072 by 1536): it runs at DP 64, not in rounds of 2560 at DP 320.
  base.data.batch_ramp = BatchRampConfig{3072, 1536, 469e9};
  auto ramped = ScaleToGpus(base, 512, false, &note);
  ASSERT_TRUE(ramped.ok()) << ramped.status().ToString();
  EXPECT_EQ(ramped->data.batch_ramp.start, 3072);
  EXPECT_EQ(ramped->training.steps, base.training.steps);
  auto dropped = ScaleToGpus(base, 2560, false, &note);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(dropped->data.batch_ramp.start, 0);
  EXPECT_NE(note.find("batch ramp (from 3072 by 1536) dropped"), std::string::npos) << note;
  EXPECT_GE(dropped->TokensAfter(dropped->training.steps), base.TokensAfter(base.training.steps));
}

TEST(PlannerCheckpoint, BadGpusAndMtbfNameTheFlag) {
  const JobSpec base = Job671(256, 8, 4, 32, 15360);
  for (int64_t bad : {0, -256, 100000, 300}) {
    auto s = ScaleToGpus(base, bad, false, nullptr);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("--gpus"), std::string::npos) << s.status().message();
  }
  EXPECT_NE(ScaleToGpus(base, 100000, false, nullptr).status().message().find("99840 and 100096"),
            std::string::npos);
  auto c = *LoadClusterProfile("gb300-nvl72");
  auto sw = *LoadSoftwareProfile("ours");
  for (double bad : {0.0, -50000.0, std::nan(""), HUGE_VAL}) {
    PlanOptions o;
    o.mtbf_hours = bad;
    auto p = PlanJob(base, c, sw, o);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find("--mtbf-hours"), std::string::npos) << p.status().message();
  }
}

}  // namespace
}  // namespace moe
