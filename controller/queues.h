// Queues with quotas, Kueue's ClusterQueue as the model (moe-controller --queues FILE).
//
// A queue has a nominal quota per device type (cpu, cuda), counted in ranks (one rank holds one
// device). Queues of one cohort lend each other what they do not use: a queue may run past its
// nominal quota ("borrow") while the cohort as a whole stays within the sum of its nominal quotas,
// and at most `borrowing_limit` past it. Borrowed capacity is lent, not given: a job that fits its
// own queue's nominal quota may preempt the borrowers of its cohort to get it back, whatever their
// priority (Kueue's reclaimWithinCohort). Queues that compete share by weight: among queued jobs of
// equal priority, the one whose queue uses the smallest share of its nominal quota goes first.
//
// Without a queues file every job is in one unlimited queue, "default". Pure value types: the
// controller keeps the usage, and the tests and the scheduler benchmark call these directly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe::controller {

// Bounds of a queues file: every sum over queues and devices stays far below int64's limit.
inline constexpr int64_t kMaxQuotaRanks = int64_t{1} << 40;
inline constexpr size_t kMaxQueues = 4096;

struct QueueSpec {
  std::string name;
  std::string cohort;                    // empty: it neither lends nor borrows
  std::map<std::string, int64_t> quota;  // device type -> nominal ranks (absent: 0)
  std::map<std::string, int64_t>
      borrowing_limit;  // device type -> ranks past nominal (absent: no limit)
  int64_t weight = 1;   // fair sharing: a queue of weight 2 gets twice the share
  // Its admission SLO: a job of the queue waiting longer (for anything but its quota or a
  // dependency) pages (MoEQueueWaitOverSLO); 0: none.
  double wait_slo_seconds = 0;
};

struct QueuesConfig {
  std::vector<QueueSpec> queues;
  std::string default_queue;  // for jobs that name no metadata.queue; empty: they must name one
};

// The YAML document (docs/operations.md, "Queues and quotas"); errors name the field.
StatusOr<QueuesConfig> ParseQueuesConfig(const std::string& text);
StatusOr<QueuesConfig> LoadQueuesFile(const std::string& path);

// Ranks in use per queue and device type.
using QueueUsage = std::map<std::string, std::map<std::string, int64_t>>;
int64_t Used(const QueueUsage& usage, const std::string& queue,
             const std::string& device);  // 0 when absent

enum class Admission {
  kFits,       // within quota and the cohort's room
  kReclaim,    // within its nominal quota, but the cohort's room is lent out: may preempt borrowers
  kOverQuota,  // waits: past what the queue may use now
};

class QueueBook {
 public:
  QueueBook() = default;
  explicit QueueBook(QueuesConfig config);

  bool enabled() const { return !config_.queues.empty(); }
  const QueuesConfig& config() const { return config_; }
  const QueueSpec* Find(const std::string& name) const;

  // The queue a job goes to (metadata.queue, or the default), or why it cannot be queued.
  StatusOr<std::string> Resolve(const std::string& named) const;
  // Refuses at submit a job its queue can never run (world size past nominal + borrowing).
  Status CheckCanEverFit(const std::string& queue, const std::string& device, int64_t ranks) const;

  // Whether `ranks` more of `device` in `queue` fit now; *reason says why not (or what it borrows).
  Admission Admit(const std::string& queue, const std::string& device, int64_t ranks,
                  const QueueUsage& usage, std::string* reason) const;
  // The queue's share of its nominal quota (largest over device types, divided by its weight).
  double Share(const std::string& queue, const QueueUsage& usage) const;
  // Ranks used past nominal, per device type.
  int64_t Borrowed(const std::string& queue, const std::string& device,
                   const QueueUsage& usage) const;
  int64_t Nominal(const std::string& queue, const std::string& device) const;
  // Ranks the queue may use at most (nominal + what it may borrow); -1: no limit.
  int64_t Ceiling(const std::string& queue, const std::string& device) const;
  // The queues of `queue`'s cohort, itself included.
  std::vector<const QueueSpec*> CohortOf(const std::string& queue) const;

 private:
  QueuesConfig config_;
  std::map<std::string, size_t> index_;
};

inline constexpr char kDefaultQueue[] = "default";

}  // namespace moe::controller
