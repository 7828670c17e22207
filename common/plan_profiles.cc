#include "common/plan_profiles.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/file_util.h"
#include "common/schema.h"

namespace moe {

struct Fraction {  // 0 < v <= 1: an efficiency is a physical share of a peak
  Status operator()(double v, const std::string& path) const {
    if (v > 0 && v <= 1) return OkStatus();
    return schema_internal::Refuse(
        path, "must be a fraction in (0, 1], got " + schema_internal::FormatValue(v));
  }
};
struct Ratio {  // 1 <= v <= 16: the busiest of several over their mean
  Status operator()(double v, const std::string& path) const {
    if (v >= 1 && v <= 16) return OkStatus();
    return schema_internal::Refuse(
        path, "must be a max/mean ratio in [1, 16], got " + schema_internal::FormatValue(v));
  }
};
struct Share {  // 0 <= v <= 1
  Status operator()(double v, const std::string& path) const {
    if (v >= 0 && v <= 1) return OkStatus();
    return schema_internal::Refuse(path,
                                   "must be in [0, 1], got " + schema_internal::FormatValue(v));
  }
};

// clang-format off
template <>
const Schema<ClusterProfile>& SchemaOf<ClusterProfile>() {
  using C = ClusterProfile;
  static const auto* schema = new Schema<C>("ClusterProfile", {
      Field("name", &C::name, NotEmpty()),
      Field("description", &C::description),
      Field("device", &C::device, OneOf({"cuda", "cpu"})),
      Field("peak_bf16_tflops", &C::peak_bf16_tflops, Positive()),
      Field("peak_fp8_tflops", &C::peak_fp8_tflops, NonNegative()),
      Field("memory_gb", &C::memory_gb, Positive()),
      Field("memory_tbps", &C::memory_tbps, Positive()),
      Field("scale_up_gbps", &C::scale_up_gbps, Positive()),
      Field("domain_size", &C::domain_size, Positive()),
      Field("scale_out_gbps", &C::scale_out_gbps, Positive()),
      Field("p2p_latency_us", &C::p2p_latency_us, NonNegative()),
      Field("host_copy_gbps", &C::host_copy_gbps, Positive()),
      Field("checkpoint_write_gbps", &C::checkpoint_write_gbps, Positive()),
      Field("checkpoint_read_gbps", &C::checkpoint_read_gbps, Positive()),
      Field("restart_seconds", &C::restart_seconds, NonNegative()),
      Field("sources", &C::sources),
  });
  return *schema;
}

template <>
const Schema<HostProfile>& SchemaOf<HostProfile>() {
  using H = HostProfile;
  static const auto* schema = new Schema<H>("HostProfile", {
      Field("launch_us", &H::launch_us, NonNegative()),
      Field("graph_launch_us", &H::graph_launch_us, NonNegative()),
      Field("sync_us", &H::sync_us, NonNegative()),
      Field("attention_kernels", &H::attention_kernels, NonNegative()),
      Field("router_kernels", &H::router_kernels, NonNegative()),
      Field("dispatch_kernels", &H::dispatch_kernels, NonNegative()),
      Field("experts_kernels", &H::experts_kernels, NonNegative()),
      Field("shared_expert_kernels", &H::shared_expert_kernels, NonNegative()),
      Field("dense_ffn_kernels", &H::dense_ffn_kernels, NonNegative()),
      Field("syncs_per_moe_layer", &H::syncs_per_moe_layer, NonNegative()),
      Field("cuda_graphs", &H::cuda_graphs,
            Each(OneOf({"attention", "router", "dispatch", "shared_expert", "dense_ffn", "experts"}))),
  });
  return *schema;
}

template <>
const Schema<SoftwareProfile>& SchemaOf<SoftwareProfile>() {
  using S = SoftwareProfile;
  static const auto* schema = new Schema<S>("SoftwareProfile", {
      Field("name", &S::name, NotEmpty()),
      Field("base", &S::base),
      Field("description", &S::description),
      Field("gemm_efficiency", &S::gemm_efficiency, Fraction()),
      Field("grouped_gemm_half_rows", &S::grouped_gemm_half_rows, NonNegative()),
      Field("attention_efficiency", &S::attention_efficiency, Fraction()),
      Field("memory_efficiency", &S::memory_efficiency, Fraction()),
      Field("sm_share", &S::sm_share, Fraction()),
      Field("dispatcher", &S::dispatcher, OneOf({"nccl", "deepep", "hybridep", "gloo"})),
      Field("nccl_a2a_efficiency", &S::nccl_a2a_efficiency, Fraction()),
      Field("deepep_a2a_efficiency", &S::deepep_a2a_efficiency, Fraction()),
      Field("hybridep_a2a_efficiency", &S::hybridep_a2a_efficiency, Fraction()),
      Field("gloo_a2a_efficiency", &S::gloo_a2a_efficiency, Fraction()),
      Field("cross_domain_efficiency", &S::cross_domain_efficiency, Fraction()),
      Field("fp8_dispatch", &S::fp8_dispatch),
      Field("expert_imbalance", &S::expert_imbalance, Ratio()),
      Field("a2a_overlap", &S::a2a_overlap, Share()),
      Field("p2p_overlap", &S::p2p_overlap, Share()),
      Field("dp_overlap", &S::dp_overlap, Share()),
      Field("pipeline_schedule", &S::pipeline_schedule, OneOf({"1f1b", "dualpipe"})),
      Field("fusions", &S::fusions,
            Each(OneOf({"permute", "router", "quantization", "norm_quantization", "cross_entropy", "swiglu"}))),
      Field("host", &S::host),
      Field("moments_dtype", &S::moments_dtype, OneOf({"", "fp32", "bf16"})),
      Field("fp8_saved_inputs", &S::fp8_saved_inputs),
      Field("tensor_parallel", &S::tensor_parallel),
      Field("calibrated", &S::calibrated),
      Field("recompute", &S::recompute,
            Each(OneOf({"core_attn", "mla_up_proj", "mlp", "moe_act", "full"}))),
      Field("goodput", &S::goodput, Fraction()),
      Field("sources", &S::sources),
  });
  return *schema;
}
// clang-format on

double ClusterProfile::peak_tflops(const std::string& precision) const {
  return precision == "fp8" && peak_fp8_tflops > 0 ? peak_fp8_tflops : peak_bf16_tflops;
}

bool SoftwareProfile::Fused(const std::string& what) const {
  return std::find(fusions.begin(), fusions.end(), what) != fusions.end();
}

bool SoftwareProfile::Captured(const std::string& part) const {
  const auto& g = host.cuda_graphs;
  return std::find(g.begin(), g.end(), part) != g.end();
}

double SoftwareProfile::DispatcherEfficiency() const {
  if (dispatcher == "deepep") return deepep_a2a_efficiency;
  if (dispatcher == "hybridep") return hybridep_a2a_efficiency;
  if (dispatcher == "gloo") return gloo_a2a_efficiency;
  return nccl_a2a_efficiency;
}

namespace {

std::vector<std::string> NamesOf(const char* kind) {
  std::vector<std::string> out;
  for (const BuiltinProfile& p : BuiltinProfiles()) {
    if (std::string(p.kind) == kind) out.emplace_back(p.name);
  }
  return out;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The document of a built-in profile, or of the file at `name_or_path`.
StatusOr<Node> ProfileDocument(const char* kind, const std::string& name_or_path,
                               std::string* origin) {
  for (const BuiltinProfile& p : BuiltinProfiles()) {
    if (std::string(p.kind) == kind && name_or_path == p.name) {
      *origin = std::string(kind) + " profile " + p.name;
      return ParseYaml(p.text);
    }
  }
  const bool looks_like_path =
      name_or_path.find('/') != std::string::npos || name_or_path.find(".y") != std::string::npos;
  if (!looks_like_path) {
    return NotFoundError(std::string("no ") + kind + " profile named '" + name_or_path +
                         "' (built in: " + JoinNames(NamesOf(kind)) +
                         "; or a path to a YAML file)");
  }
  MOE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(name_or_path));
  *origin = name_or_path;
  auto doc = ParseYaml(text);
  if (!doc.ok()) return doc.status().WithPrefix(name_or_path);
  return doc;
}

// `over`'s keys replace `base`'s, maps merged key by key.
void Overlay(Node* base, const Node& over) {
  if (!base->IsMap() || !over.IsMap()) {
    *base = over;
    return;
  }
  for (const auto& [k, v] : over.items()) {
    Node* mine = base->FindMutable(k);
    if (mine != nullptr && mine->IsMap() && v.IsMap()) {
      Overlay(mine, v);
    } else {
      base->Set(k, v);
    }
  }
}

}  // namespace

std::vector<std::string> BuiltinClusterNames() { return NamesOf("cluster"); }
std::vector<std::string> BuiltinSoftwareNames() { return NamesOf("software"); }

StatusOr<ClusterProfile> ParseClusterProfile(const Node& doc, const std::string& origin) {
  ClusterProfile c;
  const Schema<ClusterProfile>& schema = SchemaOf<ClusterProfile>();
  Status st = schema.Read(doc, "", &c);
  if (st.ok()) st = schema.Check(c, "");
  if (!st.ok()) return st.WithPrefix(origin);
  return c;
}

StatusOr<SoftwareProfile> ParseSoftwareProfile(const Node& doc, const std::string& origin) {
  Node full = doc;
  const Node* base = doc.IsMap() ? doc.Find("base") : nullptr;
  if (base != nullptr && base->IsScalar() && !base->scalar().empty()) {
    if (base->scalar() == origin) return InvalidArgumentError(origin + ": base: names itself");
    MOE_ASSIGN_OR_RETURN(const SoftwareProfile parent, LoadSoftwareProfile(base->scalar()));
    full = SoftwareProfileToNode(parent);
    Overlay(&full, doc);
  }
  SoftwareProfile s;
  const Schema<SoftwareProfile>& schema = SchemaOf<SoftwareProfile>();
  Status st = schema.Read(full, "", &s);
  if (st.ok()) st = schema.Check(s, "");
  if (!st.ok()) return st.WithPrefix(origin);
  return s;
}

StatusOr<ClusterProfile> LoadClusterProfile(const std::string& name_or_path) {
  std::string origin;
  MOE_ASSIGN_OR_RETURN(const Node doc, ProfileDocument("cluster", name_or_path, &origin));
  return ParseClusterProfile(doc, origin);
}

StatusOr<SoftwareProfile> LoadSoftwareProfile(const std::string& name_or_path) {
  std::string origin;
  MOE_ASSIGN_OR_RETURN(const Node doc, ProfileDocument("software", name_or_path, &origin));
  return ParseSoftwareProfile(doc, origin);
}

Status ApplyDocumentOverride(Node* doc, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgumentError("'" + assignment + "': expected field.path=value");
  }
  const std::string path = assignment.substr(0, eq);
  auto value = ParseYaml(assignment.substr(eq + 1));
  if (!value.ok()) return value.status().WithPrefix(path);
  Node* at = doc;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) return InvalidArgumentError("'" + path + "': an empty field name in the path");
    if (!at->IsMap()) *at = Node::Map();
    if (dot == std::string::npos) {
      at->Set(key, *value);
      return OkStatus();
    }
    if (at->FindMutable(key) == nullptr) at->Set(key, Node::Map());
    at = at->FindMutable(key);
    start = dot + 1;
  }
}

Status ApplySoftwareOverride(SoftwareProfile* p, const std::string& assignment) {
  Node doc = SoftwareProfileToNode(*p);
  doc.Set("base", Node::Scalar(""));
  MOE_RETURN_IF_ERROR(ApplyDocumentOverride(&doc, assignment).WithPrefix("--switch"));
  MOE_ASSIGN_OR_RETURN(SoftwareProfile out, ParseSoftwareProfile(doc, "--switch " + assignment));
  out.base = p->base;
  *p = std::move(out);
  return OkStatus();
}

ClusterProfile LocalProfileForRanks(const ClusterProfile& machine, int64_t ranks) {
  if (ranks <= 1) return machine;
  ClusterProfile c = machine;
  const int64_t threads = std::max<int64_t>(1, machine.domain_size / ranks);
  const double share =
      std::min(1.0, static_cast<double>(threads) / static_cast<double>(machine.domain_size));
  c.peak_bf16_tflops *= share;
  c.memory_tbps *= share;
  c.memory_gb /= static_cast<double>(ranks);
  c.domain_size = std::max(machine.domain_size, ranks);
  c.description += "; a device is one of " + std::to_string(ranks) + " ranks with " +
                   std::to_string(threads) + " thread(s)";
  c.sources.push_back("one rank's share: " + std::to_string(threads) + " of " +
                      std::to_string(machine.domain_size) +
                      " core(s) for the SGEMM rate and memory bandwidth, 1/" +
                      std::to_string(ranks) + " of the memory");
  return c;
}

StatusOr<ClusterProfile> ProbeLocalCluster() {
  std::string probe = "moe-probe";
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    if (::access((dir + "/moe-probe").c_str(), X_OK) == 0) probe = dir + "/moe-probe";
  }
  std::fprintf(stderr, "probing this machine (%s, about 2 s)...\n", probe.c_str());
  FILE* out = ::popen((probe + " 2>/dev/null").c_str(), "r");
  if (out == nullptr) return UnavailableError("--cluster local: could not run " + probe);
  std::string text;
  char buf[4096];
  for (size_t got; (got = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, got);
  const int rc = ::pclose(out);
  if (rc != 0 || text.empty()) {
    return UnavailableError("--cluster local: " + probe + " failed (exit status " +
                            std::to_string(rc) + "); build it (make build) or put it on PATH");
  }
  auto doc = ParseYaml(text);
  if (!doc.ok()) return doc.status().WithPrefix(probe);
  return ParseClusterProfile(*doc, probe);
}

Node ClusterProfileToNode(const ClusterProfile& c) { return SchemaOf<ClusterProfile>().Write(c); }
Node SoftwareProfileToNode(const SoftwareProfile& s) {
  return SchemaOf<SoftwareProfile>().Write(s);
}

}  // namespace moe
