#include "controller/queues.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/job_spec_schema.h"
#include "common/schema.h"
#include "common/yaml.h"

namespace moe {

using controller::QueuesConfig;
using controller::QueueSpec;

namespace {

Status KnownDevices(const std::map<std::string, int64_t>& m, const std::string& path) {
  for (const auto& [device, ranks] : m) {
    if (device != "cpu" && device != "cuda") {
      return InvalidArgumentError(path + "." + device + ": unknown device type (cpu or cuda)");
    }
    // Bounded so that the sums over a cohort (quotas, usage, borrowing) can never overflow.
    if (ranks < 0 || ranks > moe::controller::kMaxQuotaRanks) {
      return InvalidArgumentError(path + "." + device + ": must be in 0.." +
                                  std::to_string(moe::controller::kMaxQuotaRanks) + ", got " +
                                  std::to_string(ranks));
    }
  }
  return OkStatus();
}

}  // namespace

// clang-format off
template <>
const Schema<QueueSpec>& SchemaOf<QueueSpec>() {
  using Q = QueueSpec;
  static const auto* schema = new Schema<Q>("Queue", {
      Field("name", &Q::name, NotEmpty(), ValidName).Required("every queue has a name"),
      Field("cohort", &Q::cohort, [](const std::string& v, const std::string& path) {
        return v.empty() ? OkStatus() : ValidName(v, path);
      }),
      Field("quota", &Q::quota, KnownDevices),
      Field("borrowing_limit", &Q::borrowing_limit, KnownDevices),
      Field("weight", &Q::weight, Positive()),
      Field("wait_slo_seconds", &Q::wait_slo_seconds, NonNegative()),
  });
  return *schema;
}

template <>
const Schema<QueuesConfig>& SchemaOf<QueuesConfig>() {
  using C = QueuesConfig;
  static const auto* schema = new Schema<C>("Queues", {
      Field("queues", &C::queues).Required("the file lists its queues"),
      Field("default_queue", &C::default_queue),
  });
  return *schema;
}
// clang-format on

}  // namespace moe

namespace moe::controller {

namespace {

int64_t Get(const std::map<std::string, int64_t>& m, const std::string& key, int64_t absent) {
  const auto it = m.find(key);
  return it == m.end() ? absent : it->second;
}

Status CheckQueues(const QueuesConfig& c) {
  std::map<std::string, size_t> seen;
  if (c.queues.size() > kMaxQueues) {
    return InvalidArgumentError("queues: at most " + std::to_string(kMaxQueues) + ", got " +
                                std::to_string(c.queues.size()));
  }
  for (size_t i = 0; i < c.queues.size(); ++i) {
    const std::string& name = c.queues[i].name;
    if (!seen.emplace(name, i).second) {
      return InvalidArgumentError("queues[" + std::to_string(i) + "].name: '" + name +
                                  "' is also queues[" + std::to_string(seen[name]) + "]");
    }
  }
  if (!c.default_queue.empty() && !seen.count(c.default_queue)) {
    return InvalidArgumentError("default_queue: '" + c.default_queue +
                                "' is not one of the queues");
  }
  return OkStatus();
}

}  // namespace

int64_t Used(const QueueUsage& usage, const std::string& queue, const std::string& device) {
  const auto it = usage.find(queue);
  return it == usage.end() ? 0 : Get(it->second, device, 0);
}

StatusOr<QueuesConfig> ParseQueuesConfig(const std::string& text) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(text));
  if (doc.IsNull()) return InvalidArgumentError("the queues document is empty");
  QueuesConfig c;
  MOE_RETURN_IF_ERROR(SchemaOf<QueuesConfig>().Read(doc, "", &c));
  MOE_RETURN_IF_ERROR(SchemaOf<QueuesConfig>().Check(c, ""));
  if (c.queues.empty()) return InvalidArgumentError("queues: lists no queue");
  MOE_RETURN_IF_ERROR(CheckQueues(c));
  return c;
}

StatusOr<QueuesConfig> LoadQueuesFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("--queues: cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  auto c = ParseQueuesConfig(text.str());
  if (!c.ok()) return Status(c.status().code(), "--queues " + path + ": " + c.status().message());
  return c;
}

QueueBook::QueueBook(QueuesConfig config) : config_(std::move(config)) {
  for (size_t i = 0; i < config_.queues.size(); ++i) index_[config_.queues[i].name] = i;
}

const QueueSpec* QueueBook::Find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &config_.queues[it->second];
}

StatusOr<std::string> QueueBook::Resolve(const std::string& named) const {
  std::string known;
  for (const QueueSpec& q : config_.queues) known += (known.empty() ? "" : ", ") + q.name;
  if (!enabled()) {
    if (named.empty() || named == kDefaultQueue) return std::string(kDefaultQueue);
    return InvalidArgumentError(
        "metadata.queue: '" + named +
        "' is not a queue here: this controller defines none (moe-controller --queues FILE)");
  }
  if (named.empty()) {
    if (!config_.default_queue.empty()) return config_.default_queue;
    return InvalidArgumentError(
        "metadata.queue: missing; this controller has no default queue (queues: " + known + ")");
  }
  if (Find(named) == nullptr) {
    return InvalidArgumentError("metadata.queue: unknown queue '" + named + "' (queues: " + known +
                                ")");
  }
  return named;
}

int64_t QueueBook::Nominal(const std::string& queue, const std::string& device) const {
  const QueueSpec* q = Find(queue);
  return q == nullptr ? 0 : Get(q->quota, device, 0);
}

std::vector<const QueueSpec*> QueueBook::CohortOf(const std::string& queue) const {
  const QueueSpec* q = Find(queue);
  if (q == nullptr) return {};
  if (q->cohort.empty()) return {q};
  std::vector<const QueueSpec*> out;
  for (const QueueSpec& p : config_.queues) {
    if (p.cohort == q->cohort) out.push_back(&p);
  }
  return out;
}

int64_t QueueBook::Ceiling(const std::string& queue, const std::string& device) const {
  if (!enabled()) return -1;
  const QueueSpec* q = Find(queue);
  if (q == nullptr) return 0;
  int64_t lendable = 0;  // what the rest of the cohort could lend at most
  for (const QueueSpec* p : CohortOf(queue)) {
    if (p != q) lendable += Get(p->quota, device, 0);
  }
  const int64_t limit = Get(q->borrowing_limit, device, -1);
  return Get(q->quota, device, 0) + (limit < 0 ? lendable : std::min(limit, lendable));
}

Status QueueBook::CheckCanEverFit(const std::string& queue, const std::string& device,
                                  int64_t ranks) const {
  const int64_t ceiling = Ceiling(queue, device);
  if (ceiling < 0 || ranks <= ceiling) return OkStatus();
  const int64_t nominal = Nominal(queue, device);
  return FailedPreconditionError("the job can never fit its queue: it needs " +
                                 std::to_string(ranks) + " " + device + " ranks and queue " +
                                 queue + " may use at most " + std::to_string(ceiling) +
                                 " (nominal quota " + std::to_string(nominal) + ", borrowing " +
                                 std::to_string(ceiling - nominal) + "; moe-controller --queues)");
}

int64_t QueueBook::Borrowed(const std::string& queue, const std::string& device,
                            const QueueUsage& usage) const {
  if (!enabled()) return 0;
  return std::max<int64_t>(0, Used(usage, queue, device) - Nominal(queue, device));
}

Admission QueueBook::Admit(const std::string& queue, const std::string& device, int64_t ranks,
                           const QueueUsage& usage, std::string* reason) const {
  if (!enabled()) return Admission::kFits;
  const QueueSpec* q = Find(queue);
  if (q == nullptr) {
    *reason = "queue " + queue + " is not defined by this controller (moe-controller --queues)";
    return Admission::kOverQuota;
  }
  const int64_t used = Used(usage, queue, device), nominal = Get(q->quota, device, 0);
  const std::string use = "queue " + queue + " uses " + std::to_string(used) + " of its " +
                          std::to_string(nominal) + " " + device + " ranks";
  const int64_t ceiling = Ceiling(queue, device);
  if (used + ranks > ceiling) {
    *reason = "over quota: " + use + " and may borrow " + std::to_string(ceiling - nominal) +
              "; the job needs " + std::to_string(ranks);
    return Admission::kOverQuota;
  }
  int64_t cohort_used = 0, cohort_nominal = 0;
  for (const QueueSpec* p : CohortOf(queue)) {
    cohort_used += Used(usage, p->name, device);
    cohort_nominal += Get(p->quota, device, 0);
  }
  if (cohort_used + ranks <= cohort_nominal) {
    *reason = used + ranks > nominal ? "borrowing " + std::to_string(used + ranks - nominal) + " " +
                                           device + " ranks from cohort " + q->cohort
                                     : "";
    return Admission::kFits;
  }
  const bool reclaim = used + ranks <= nominal;
  *reason = std::string(reclaim ? "waiting for the quota its queue lent: " : "over quota: ") +
            "cohort " + q->cohort + " uses " + std::to_string(cohort_used) + " of its " +
            std::to_string(cohort_nominal) + " " + device + " ranks; " + use + ", the job needs " +
            std::to_string(ranks);
  return reclaim ? Admission::kReclaim : Admission::kOverQuota;
}

double QueueBook::Share(const std::string& queue, const QueueUsage& usage) const {
  const QueueSpec* q = Find(queue);
  if (q == nullptr) return 0;
  double share = 0;
  const auto it = usage.find(queue);
  if (it == usage.end()) return 0;
  for (const auto& [device, used] : it->second) {
    const int64_t nominal = Get(q->quota, device, 0);
    share = std::max(share, nominal > 0 ? double(used) / double(nominal) : used > 0 ? 1e9 : 0.0);
  }
  return share / double(q->weight);
}

}  // namespace moe::controller
