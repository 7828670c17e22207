#include "controller/worker_registry.h"

#include <sys/random.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "controller/worker_claims.h"

namespace moe::controller {
namespace {

// 32 random bytes from the kernel, as hex: a credential nobody can guess.
std::string NewSession() {
  unsigned char buf[32];
  size_t got = 0;
  while (got < sizeof(buf)) {
    const ssize_t n = ::getrandom(buf + got, sizeof(buf) - got, 0);
    MOE_CHECK(n > 0) << "getrandom failed";
    got += static_cast<size_t>(n);
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : buf) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace

Status WorkerRegistry::CheckNameFree(const moe::v1::Register& reg, WorkerChannel* channel) const {
  auto it = workers_.find(reg.name());
  if (it == workers_.end()) return OkStatus();
  const WorkerEntry& old = it->second;
  if (!old.session.empty() && reg.session() == old.session) return OkStatus();  // its own reconnect
  if (old.channel != nullptr && !old.lost && old.channel != channel) {
    return AlreadyExistsError("a live worker named '" + reg.name() + "' is already connected");
  }
  const double left = old.held_until - clock_.Monotonic();
  if (!old.session.empty() && left > 0) {
    return PermissionDeniedError("worker name '" + reg.name() +
                                 "' is held by another session for " +
                                 std::to_string(static_cast<int>(left) + 1) +
                                 " more s (only that worker may reconnect under it until then)");
  }
  return OkStatus();
}

StatusOr<std::string> WorkerRegistry::Admit(const moe::v1::Register& reg,
                                            WorkerChannel* channel) const {
  MOE_RETURN_IF_ERROR(ValidateRegistration(reg));
  MOE_RETURN_IF_ERROR(CheckNameFree(reg, channel));
  auto it = workers_.find(reg.name());
  if (it != workers_.end() && !it->second.session.empty() && reg.session() == it->second.session) {
    return it->second.session;
  }
  return NewSession();  // a new holder of the name (or its first registration)
}

StatusOr<WorkerEntry*> WorkerRegistry::Register(const moe::v1::Register& reg,
                                                WorkerChannel* channel) {
  MOE_ASSIGN_OR_RETURN(const std::string session, Admit(reg, channel));
  return Register(reg, channel, session);
}

StatusOr<WorkerEntry*> WorkerRegistry::Register(const moe::v1::Register& reg,
                                                WorkerChannel* channel,
                                                const std::string& session) {
  WorkerEntry& w = workers_[reg.name()];
  const bool fresh = w.info.name().empty();
  w.session = session;
  w.info.set_name(reg.name());
  w.info.set_rack(reg.rack());
  w.info.set_node(reg.node());
  w.info.set_device(reg.device());
  w.info.set_address(reg.address());
  *w.info.mutable_data_roots() = reg.data_roots();
  *w.info.mutable_checkpoint_roots() = reg.checkpoint_roots();
  if (fresh) w.info.set_registered_at(clock_.Now());
  w.cpu_cores = reg.cpu_cores();
  w.memory_bytes = reg.memory_bytes();
  w.host_id = reg.host_id();
  w.channel = channel;
  w.lost = false;
  w.leaving = false;  // a leaving worker that reconnects says so again (WorkerAgent::Leave)
  leases_.Open(reg.name(), channel);
  sharing_dirty_ = true;
  return &w;
}

void WorkerRegistry::Restore(const moe::v1::Worker& info, const std::string& session,
                             double hold_seconds) {
  WorkerEntry& w = workers_[info.name()];
  w.info = info;
  w.info.clear_job_id();
  w.info.clear_state();
  w.session = session;
  w.drained = info.drained();
  w.lost = true;
  w.lost_at = clock_.Monotonic();
  w.held_until = clock_.Monotonic() + hold_seconds;
  sharing_dirty_ = true;
}

WorkerEntry* WorkerRegistry::FindBySession(const std::string& session) {
  if (session.empty()) return nullptr;
  for (auto& [name, w] : workers_) {
    if (w.session == session && !w.lost && w.channel != nullptr) return &w;
  }
  return nullptr;
}

void WorkerRegistry::MarkLost(WorkerEntry& w) {
  leases_.Close(w.info.name());
  sharing_dirty_ = true;
  w.lost = true;
  w.lost_at = clock_.Monotonic();
  w.held_until = clock_.Monotonic() + lease_;
}

void WorkerRegistry::Heartbeat(const std::string& name) {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.lost) return;
  leases_.Renew(name, it->second.channel);
}

bool WorkerRegistry::AllowStepReport(const std::string& name) {
  WorkerEntry* w = Find(name);
  if (w == nullptr) return false;
  const double second = std::floor(clock_.Monotonic());
  if (second != w->report_window) {
    w->report_window = second;
    w->reports_in_window = 0;
  }
  return ++w->reports_in_window <= kMaxStepReportsPerSecond;
}

bool WorkerRegistry::Disconnected(const std::string& name, WorkerChannel* channel) {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.channel != channel) return false;
  it->second.channel = nullptr;
  if (it->second.lost) return false;
  MarkLost(it->second);
  return true;
}

std::vector<std::string> WorkerRegistry::ExpireLeases() {
  std::vector<std::string> lost;
  for (const std::string& name : leases_.Expire()) {
    auto it = workers_.find(name);
    if (it == workers_.end() || it->second.lost) continue;
    MarkLost(it->second);
    lost.push_back(name);
  }
  return lost;
}

WorkerEntry* WorkerRegistry::Find(const std::string& name) {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

void WorkerRegistry::Assign(const std::string& name, const std::string& job_id, int attempt,
                            int rank) {
  if (WorkerEntry* w = Find(name)) {
    w->job_id = job_id;
    w->attempt = attempt;
    w->rank = rank;
  }
}

void WorkerRegistry::Release(const std::string& name) {
  if (WorkerEntry* w = Find(name)) {
    w->job_id.clear();
    w->attempt = 0;
    w->rank = -1;
  }
}

Status WorkerRegistry::SetDrained(const std::string& name, bool drained) {
  WorkerEntry* w = Find(name);
  if (w == nullptr) return NotFoundError("no worker named '" + name + "'");
  w->drained = drained;
  return OkStatus();
}

void WorkerRegistry::SetLeaving(const std::string& name) {
  if (WorkerEntry* w = Find(name)) w->leaving = true;
}

void WorkerRegistry::Remove(const std::string& name) {
  leases_.Close(name);
  sharing_dirty_ = true;
  workers_.erase(name);
}

std::vector<std::string> WorkerRegistry::LostLongerThan(double seconds) const {
  std::vector<std::string> out;
  const double now = clock_.Monotonic();
  for (const auto& [name, w] : workers_) {
    if (w.lost && w.channel == nullptr && now - w.lost_at > seconds) out.push_back(name);
  }
  return out;
}

std::vector<Slot> WorkerRegistry::FreeSlots() const {
  std::vector<Slot> out;
  for (const auto& [name, w] : workers_) {
    if (w.channel != nullptr && !w.lost && !w.drained && !w.leaving && !w.busy()) {
      out.push_back({name, w.info.rack(), w.info.node(), w.info.device(), MemoryFor(name)});
    }
  }
  return out;
}

bool WorkerRegistry::Placeable(const std::string& name) const {
  const auto it = workers_.find(name);
  if (it == workers_.end()) return false;
  const WorkerEntry& w = it->second;
  return w.channel != nullptr && !w.lost && !w.drained && !w.leaving;
}

std::vector<Slot> WorkerRegistry::LiveSlots() const {
  std::vector<Slot> out;
  for (const auto& [name, w] : workers_) {
    if (!w.lost && !w.leaving)
      out.push_back({name, w.info.rack(), w.info.node(), w.info.device(), MemoryFor(name)});
  }
  return out;
}

moe::v1::Worker WorkerRegistry::Describe(const WorkerEntry& w) const {
  moe::v1::Worker out = w.info;
  out.set_drained(w.drained);
  out.set_memory_bytes(MemoryFor(w.info.name()));
  out.set_job_id(w.job_id);
  out.set_rank(w.rank);
  if (const double heard = leases_.LastHeard(w.info.name()); heard > 0)
    out.set_last_heartbeat(heard);
  if (w.lost)
    out.set_state(moe::v1::LOST);
  else if (w.leaving)
    out.set_state(moe::v1::LEAVING);
  else if (w.busy())
    out.set_state(moe::v1::BUSY);
  else if (w.drained)
    out.set_state(moe::v1::DRAINED);
  else
    out.set_state(moe::v1::IDLE);
  return out;
}

// Live CPU workers per node and per host id, counted once per change of the registry (the
// scheduler asks for every worker's share: a count per call would be quadratic in workers).
void WorkerRegistry::CountSharing() const {
  if (!sharing_dirty_) return;
  per_node_.clear();
  per_host_.clear();
  for (const auto& [n, w] : workers_) {
    if (w.lost || w.info.device() != "cpu") continue;
    ++per_node_[w.info.node()];
    if (!w.host_id.empty()) ++per_host_[w.host_id];
  }
  sharing_dirty_ = false;
}

int WorkerRegistry::CpuWorkersSharingHost(const WorkerEntry& of) const {
  CountSharing();
  // Same machine: by host id when workers send one (several "nodes" may share a host), else by
  // node.
  const auto& counts = of.host_id.empty() ? per_node_ : per_host_;
  const auto it = counts.find(of.host_id.empty() ? of.info.node() : of.host_id);
  return std::max(1, it == counts.end() ? 0 : it->second);
}

int WorkerRegistry::CpuThreadsFor(const std::string& name) const {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.cpu_cores <= 0 || it->second.info.device() != "cpu")
    return 0;
  return std::max(1, it->second.cpu_cores / CpuWorkersSharingHost(it->second));
}

int64_t WorkerRegistry::MemoryFor(const std::string& name) const {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.memory_bytes <= 0) return 0;
  if (it->second.info.device() != "cpu") return it->second.memory_bytes;
  return it->second.memory_bytes / CpuWorkersSharingHost(it->second);
}

std::vector<moe::v1::Worker> WorkerRegistry::List() const {
  std::vector<moe::v1::Worker> out;
  for (const auto& [name, w] : workers_) out.push_back(Describe(w));
  return out;
}

}  // namespace moe::controller
