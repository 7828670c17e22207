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

Status WorkerRegistry::CheckNameOfNode(const moe::v1::Register& reg,
                                       const std::string& node) const {
  auto it = workers_.find(reg.name());
  if (it == workers_.end()) return OkStatus();
  const WorkerEntry& old = it->second;
  if (old.info.node() != node) {
    return PermissionDeniedError("worker name '" + reg.name() + "' belongs to node " +
                                 old.info.node() + ": the credential of node " + node +
                                 " registers only its own node's names");
  }
  if (!reg.session().empty() && reg.session() != old.session) {
    return AbortedError("superseded: node " + node + " registered '" + reg.name() +
                        "' again on a newer session; this agent's session is over (it stops)");
  }
  return OkStatus();
}

StatusOr<std::string> WorkerRegistry::Admit(const moe::v1::Register& agent,
                                            const std::vector<moe::v1::Register>& devices,
                                            WorkerChannel* channel, const std::string& node) const {
  MOE_RETURN_IF_ERROR(ValidateRegistration(agent));
  bool own = false;  // a device of this agent already holds the session it presented
  for (const moe::v1::Register& d : devices) {
    MOE_RETURN_IF_ERROR(node.empty() ? CheckNameFree(d, channel) : CheckNameOfNode(d, node));
    auto it = workers_.find(d.name());
    own = own || (it != workers_.end() && !it->second.session.empty() &&
                  agent.session() == it->second.session);
  }
  return own ? agent.session() : NewSession();  // else a new holder (or its first registration)
}

StatusOr<WorkerEntry*> WorkerRegistry::Register(const moe::v1::Register& agent,
                                                WorkerChannel* channel) {
  const std::vector<moe::v1::Register> devices = DeviceRegistrations(agent);
  MOE_ASSIGN_OR_RETURN(const std::string session, Admit(agent, devices, channel));
  WorkerEntry* first = nullptr;
  for (const auto& d : devices) {
    WorkerEntry* w = Register(d, channel, session);
    if (first == nullptr) first = w;
  }
  return first;
}

WorkerEntry* WorkerRegistry::Register(const moe::v1::Register& reg, WorkerChannel* channel,
                                      const std::string& session) {
  WorkerEntry& w = workers_[reg.name()];
  ++memory_version_;
  const bool fresh = w.info.name().empty();
  Share(w, -1);  // counted again below, as it registers now
  IndexNode(reg.name(), fresh ? std::string() : w.info.node(), reg.node());
  if (!w.session.empty() && w.session != session) by_session_.erase(w.session);
  w.session = session;
  w.agent = AgentOfWorker(reg.name());
  by_session_[session] = w.agent;
  w.info.set_name(reg.name());
  w.info.set_agent(w.agent);
  w.info.set_device_index(DeviceIndexOfWorker(reg.name()));
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
  SetLost(w, false);
  w.lost_with_rank = false;  // it says what it runs now (ReconcileRanks)
  w.root_offered = false;    // offered again (or not) by this registration's answer
  w.leaving = false;         // a leaving worker that reconnects says so again (WorkerAgent::Leave)
  std::vector<std::string>& devs = agents_[w.agent];
  if (std::find(devs.begin(), devs.end(), reg.name()) == devs.end()) {
    devs.push_back(reg.name());
    std::sort(devs.begin(), devs.end(), [](const std::string& a, const std::string& b) {
      return DeviceIndexOfWorker(a) < DeviceIndexOfWorker(b);
    });
  }
  leases_.Open(w.agent, channel);
  Share(w, +1);
  return &w;
}

const std::vector<std::string>& WorkerRegistry::DevicesOf(const std::string& agent) const {
  static const std::vector<std::string> kNone;
  auto it = agents_.find(agent);
  return it == agents_.end() ? kNone : it->second;
}

std::string WorkerRegistry::WorkerFor(const std::string& agent, const std::string& job_id,
                                      int attempt, int rank) const {
  const std::vector<std::string>& devs = DevicesOf(agent);
  for (const std::string& name : devs) {
    const WorkerEntry& w = workers_.at(name);
    if (w.job_id == job_id && w.attempt == attempt && w.rank == rank) return name;
  }
  return devs.empty() ? agent : devs.front();
}

void WorkerRegistry::Restore(const moe::v1::Worker& info, const std::string& session,
                             double hold_seconds) {
  WorkerEntry& w = workers_[info.name()];
  ++memory_version_;
  Share(w, -1);  // restored lost: not counted (until a running attempt claims it: Assign)
  IndexNode(info.name(), w.info.name().empty() ? std::string() : w.info.node(), info.node());
  w.lost_with_rank = false;
  w.info = info;
  w.agent = AgentOfWorker(info.name());
  w.info.set_agent(w.agent);
  if (!session.empty()) by_session_[session] = w.agent;
  std::vector<std::string>& devs = agents_[w.agent];
  if (std::find(devs.begin(), devs.end(), info.name()) == devs.end()) devs.push_back(info.name());
  w.info.clear_job_id();
  w.info.clear_state();
  w.session = session;
  w.drained = info.drained();
  SetLost(w, true);
  w.lost_at = clock_.Monotonic();
  w.held_until = clock_.Monotonic() + hold_seconds;
}

std::vector<const WorkerEntry*> WorkerRegistry::FindBySession(const std::string& session) const {
  std::vector<const WorkerEntry*> out;
  auto agent = session.empty() ? by_session_.end() : by_session_.find(session);
  if (agent == by_session_.end()) return out;
  for (const std::string& name : DevicesOf(agent->second)) {
    const WorkerEntry& w = workers_.at(name);
    if (w.session == session && !w.lost && w.channel != nullptr) out.push_back(&w);
  }
  return out;
}

void WorkerRegistry::SetLost(WorkerEntry& w, bool lost) {
  if (w.lost != lost) lost ? ++lost_count_ : --lost_count_;
  w.lost = lost;
  ++memory_version_;
}

void WorkerRegistry::IndexNode(const std::string& name, const std::string& old_node,
                               const std::string& new_node) {
  if (old_node == new_node && !old_node.empty() && by_node_[old_node].count(name)) return;
  if (!old_node.empty()) {
    auto it = by_node_.find(old_node);
    if (it != by_node_.end() && (it->second.erase(name), it->second.empty())) by_node_.erase(it);
  }
  if (!new_node.empty()) by_node_[new_node].insert(name);
}

const std::set<std::string>& WorkerRegistry::OnNode(const std::string& node) const {
  static const std::set<std::string> kNone;
  auto it = by_node_.find(node);
  return it == by_node_.end() ? kNone : it->second;
}

void WorkerRegistry::MarkLost(WorkerEntry& w) {
  leases_.Close(w.agent);
  Share(w, -1);
  SetLost(w, true);
  w.lost_with_rank = w.busy();
  Share(w, +1);  // still counted while its rank may run
  w.lost_at = clock_.Monotonic();
  w.held_until = clock_.Monotonic() + lease_;
}

bool WorkerRegistry::Heartbeat(const std::string& agent) {
  const std::vector<std::string>& devs = DevicesOf(agent);
  if (devs.empty()) return true;
  const WorkerEntry& w = workers_.at(devs.front());
  if (w.lost) return false;
  leases_.Renew(agent, w.channel);
  return true;
}

bool WorkerRegistry::AllowStepReport(const std::string& agent) {
  const std::vector<std::string>& devs = DevicesOf(agent);
  if (devs.empty()) return false;
  WorkerEntry& w = workers_.at(devs.front());  // the agent's count is kept on its first device
  const double second = std::floor(clock_.Monotonic());
  if (second != w.report_window) {
    w.report_window = second;
    w.reports_in_window = 0;
  }
  return ++w.reports_in_window <= kMaxStepReportsPerSecond * static_cast<int>(devs.size());
}

std::vector<std::string> WorkerRegistry::Disconnected(const std::string& agent,
                                                      WorkerChannel* channel) {
  std::vector<std::string> lost;
  for (const std::string& name : DevicesOf(agent)) {
    WorkerEntry& w = workers_.at(name);
    if (w.channel != channel) continue;
    w.channel = nullptr;
    if (w.lost) continue;
    MarkLost(w);
    lost.push_back(name);
  }
  return lost;
}

std::vector<std::string> WorkerRegistry::ExpireLeases() {
  std::vector<std::string> lost;
  for (const std::string& agent : leases_.Expire()) {
    for (const std::string& name : DevicesOf(agent)) {
      WorkerEntry& w = workers_.at(name);
      if (w.lost) continue;
      MarkLost(w);
      lost.push_back(name);
    }
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
    Share(*w, -1);
    w->job_id = job_id;
    w->attempt = attempt;
    w->rank = rank;
    // A lost worker held for a running attempt (after a controller restart, until its ranks report
    // back): its rank may run on its host, as for one lost while it ran (MarkLost).
    if (w->lost) w->lost_with_rank = true;
    Share(*w, +1);
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

void WorkerRegistry::AddCheckpointRoot(const std::string& agent, const std::string& root) {
  for (const std::string& name : DevicesOf(agent)) {
    WorkerEntry* w = Find(name);
    if (w == nullptr) continue;
    const auto& roots = w->info.checkpoint_roots();
    if (std::find(roots.begin(), roots.end(), root) == roots.end())
      w->info.add_checkpoint_roots(root);
  }
}

void WorkerRegistry::RemoveCheckpointRoot(const std::string& agent, const std::string& root) {
  for (const std::string& name : DevicesOf(agent)) {
    WorkerEntry* w = Find(name);
    if (w == nullptr) continue;
    auto* roots = w->info.mutable_checkpoint_roots();
    for (int i = roots->size() - 1; i >= 0; --i)
      if (roots->Get(i) == root) roots->DeleteSubrange(i, 1);
  }
}

void WorkerRegistry::Remove(const std::string& name) {
  auto it = workers_.find(name);
  if (it == workers_.end()) return;
  ++memory_version_;
  const std::string agent = it->second.agent, session = it->second.session;
  Share(it->second, -1);
  SetLost(it->second, false);
  IndexNode(name, it->second.info.node(), "");
  workers_.erase(it);
  std::vector<std::string>& devs = agents_[agent];
  devs.erase(std::remove(devs.begin(), devs.end(), name), devs.end());
  if (!devs.empty()) return;
  agents_.erase(agent);  // its last device: the agent's lease and session go too
  leases_.Close(agent);
  if (auto s = by_session_.find(session); s != by_session_.end() && s->second == agent)
    by_session_.erase(s);
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
  if (const double heard = leases_.LastHeard(w.agent); heard > 0) out.set_last_heartbeat(heard);
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

// Live CPU workers per node and per host id, kept as workers come and go (the scheduler asks for
// every worker's share: a count per call would be quadratic in workers, and a recount per change
// was quadratic over a cold start of 131,072 devices). `w` counts while it is a CPU worker, live or
// lost with a rank that may still run (lost_with_rank).
void WorkerRegistry::Share(const WorkerEntry& w, int delta) {
  ++memory_version_;
  if ((w.lost && !w.lost_with_rank) || w.info.device() != "cpu") return;
  auto add = [delta](std::map<std::string, int>& counts, const std::string& key) {
    auto it = counts.try_emplace(key, 0).first;
    if ((it->second += delta) <= 0) counts.erase(it);
  };
  add(per_node_, w.info.node());
  if (!w.host_id.empty()) add(per_host_, w.host_id);
}

int WorkerRegistry::CpuWorkersSharingHost(const WorkerEntry& of) const {
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

const WorkerRegistry::Roomy& WorkerRegistry::Roomiest(bool cpu) const {
  Roomy& r = roomiest_[cpu ? 0 : 1];
  if (r.version == memory_version_) return r;
  r = Roomy{memory_version_, 0, ""};
  for (const auto& [name, w] : workers_) {
    const std::string& device = w.info.device();
    if (w.lost || (cpu ? device != "cpu" : device.rfind("cuda", 0) != 0)) continue;
    if (const int64_t memory = MemoryFor(name); memory > r.bytes) r.bytes = memory, r.name = name;
  }
  return r;
}

int64_t WorkerRegistry::MemoryFor(const std::string& name) const {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.memory_bytes <= 0) return 0;
  if (it->second.info.device() != "cpu") return it->second.memory_bytes;
  return it->second.memory_bytes / CpuWorkersSharingHost(it->second);
}

std::map<std::pair<std::string, std::string>, int> WorkerRegistry::CountByStateAndRack() const {
  std::map<std::pair<std::string, std::string>, int> counts;
  for (const auto& [name, w] : workers_) {
    const char* state = w.lost      ? "lost"
                        : w.leaving ? "leaving"
                        : w.busy()  ? (w.drained ? "draining" : "busy")
                        : w.drained ? "drained"
                                    : "idle";
    ++counts[{state, w.info.rack()}];
  }
  return counts;
}

std::map<std::string, RackCount> WorkerRegistry::CountByRack(int spares_per_rack) const {
  struct Placeable {
    int all = 0, idle = 0, busy = 0;
  };
  std::map<std::string, RackCount> racks;
  std::map<std::pair<std::string, std::string>, Placeable> by_type;  // (rack, cpu|cuda|...)
  for (const auto& [name, w] : workers_) {
    RackCount& r = racks[w.info.rack()];
    ++r.workers;
    const bool no_new_work = w.drained || w.leaving;
    ++(w.lost ? r.lost : no_new_work ? r.draining : w.busy() ? r.busy : r.idle);
    if (w.lost || no_new_work || w.channel == nullptr) continue;
    const std::string& device = w.info.device();
    Placeable& p = by_type[{w.info.rack(), device.substr(0, device.find(':'))}];
    ++p.all;
    ++(w.busy() ? p.busy : p.idle);
  }
  const int n = std::max(0, spares_per_rack);
  for (const auto& [key, p] : by_type) {
    RackCount& r = racks[key.first];
    r.spares += std::min(n, p.idle);
    r.spares_in_use += std::max(0, p.busy - std::max(0, p.all - n));
  }
  return racks;
}

void WorkerRegistry::Page(const std::string& after, size_t limit, size_t max_bytes,
                          moe::v1::ListWorkersResponse* resp) const {
  size_t bytes = 0;
  for (auto it = workers_.upper_bound(after); it != workers_.end(); ++it) {
    moe::v1::Worker w = Describe(it->second);
    const size_t size = w.ByteSizeLong();
    if (static_cast<size_t>(resp->workers_size()) >= limit ||
        (resp->workers_size() > 0 && bytes + size > max_bytes)) {
      resp->set_next_page_token(resp->workers(resp->workers_size() - 1).name());
      return;
    }
    bytes += size;
    *resp->add_workers() = std::move(w);
  }
}

std::vector<moe::v1::Worker> WorkerRegistry::List() const {
  std::vector<moe::v1::Worker> out;
  for (const auto& [name, w] : workers_) out.push_back(Describe(w));
  return out;
}

}  // namespace moe::controller
