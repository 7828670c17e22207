// Node identity and bulk removal: Controller::Bootstrap, DeleteNode, DeleteWorkers, and the quotas
// a registration must fit (node_credentials.h says what a node credential binds).
#include <algorithm>
#include <set>

#include "common/log.h"
#include "controller/controller.h"
#include "controller/worker_claims.h"

namespace moe::controller {

namespace {

constexpr size_t kListedMax = 1000;  // names a DeleteWorkersResponse lists (count says how many)

std::string By(const std::string& actor) { return actor.empty() ? "" : " by " + actor; }

}  // namespace

StatusOr<moe::v1::BootstrapResponse> Controller::Bootstrap(const moe::v1::BootstrapRequest& req,
                                                           const std::string& actor) {
  moe::v1::Register probe;  // the names follow a registration's grammar
  probe.set_name(req.node());
  probe.set_node(req.node());
  probe.set_rack(req.rack());
  probe.set_device("cpu");
  if (Status st = ValidateRegistration(probe); !st.ok())
    return InvalidArgumentError("bootstrap: " + std::string(st.message()));
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  MOE_ASSIGN_OR_RETURN(auto issued, credentials_.Prepare(req.node(), req.rack(), actor,
                                                         clock_.Now(), config_.max_nodes));
  MOE_RETURN_IF_ERROR(committer_.PutNodeCredential(issued.second));
  credentials_.Put(issued.second);
  MOE_LOG(INFO) << "node " << req.node() << " (rack " << req.rack() << ") bootstrapped" << By(actor)
                << ": it holds a node credential now";
  moe::v1::BootstrapResponse out;
  out.set_credential(std::move(issued.first));
  out.set_node(req.node());
  out.set_rack(req.rack());
  return out;
}

StatusOr<moe::v1::DeleteWorkersResponse> Controller::DeleteNode(const std::string& node,
                                                                const std::string& actor) {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  const std::optional<moe::v1::NodeCredential> credential = credentials_.ValidOf(node);
  const std::set<std::string>& on = workers_.OnNode(node);
  const std::vector<std::string> names(on.begin(), on.end());
  if (!credential && names.empty())
    return NotFoundError("no node named '" + node + "' (no workers, no credential)");
  moe::v1::DeleteWorkersResponse out;
  if (credential) {  // revoked first: its agent cannot come back while its workers go
    moe::v1::NodeCredential revoked = *credential;
    revoked.set_revoked_at(clock_.Now());
    revoked.set_revoked_by(actor);
    MOE_RETURN_IF_ERROR(committer_.PutNodeCredential(revoked));
    credentials_.Put(revoked);
    out.set_credential_revoked(true);
  }
  std::set<WorkerChannel*> streams;
  for (const std::string& n : names)
    if (const WorkerEntry* w = workers_.Find(n); w != nullptr && w->channel != nullptr)
      streams.insert(w->channel);
  MOE_RETURN_IF_ERROR(ForgetWorkers(names, "node " + node + " deleted" + By(actor)));
  for (WorkerChannel* s : streams)
    s->Close("node " + node + " was deleted" + By(actor) +
             " (moectl delete node): its credential is revoked");
  MOE_LOG(INFO) << "node " << node << " deleted" << By(actor) << ": " << names.size()
                << " worker(s) forgotten" << (credential ? ", its credential revoked" : "");
  out.set_count(static_cast<int64_t>(names.size()));
  for (size_t i = 0; i < names.size() && i < kListedMax; ++i) out.add_deleted(names[i]);
  return out;
}

StatusOr<moe::v1::DeleteWorkersResponse> Controller::DeleteWorkers(moe::v1::WorkerState state,
                                                                   const std::string& actor) {
  if (state != moe::v1::LOST) {
    return InvalidArgumentError(
        "state: only LOST workers are deleted in bulk (a live worker leaves when its moe-worker "
        "stops: SIGTERM)");
  }
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, w] : workers_.all())
    if (w.lost && w.channel == nullptr) names.push_back(name);
  MOE_RETURN_IF_ERROR(ForgetWorkers(names, "deleted with the lost ones" + By(actor)));
  moe::v1::DeleteWorkersResponse out;
  out.set_count(static_cast<int64_t>(names.size()));
  for (size_t i = 0; i < names.size() && i < kListedMax; ++i) out.add_deleted(names[i]);
  return out;
}

Status Controller::CheckSessionNode(const std::string& session, const std::string& node) {
  if (node.empty()) return OkStatus();
  MutexLock lock(&mu_);
  const std::vector<const WorkerEntry*> devices = workers_.FindBySession(session);
  if (!devices.empty() && devices.front()->info.node() != node) {
    return PermissionDeniedError("rendezvous: the session is node " + devices.front()->info.node() +
                                 "'s, not this credential's (" + node + ")");
  }
  return OkStatus();
}

Status Controller::ForgetWorkers(const std::vector<std::string>& names, const std::string& why) {
  if (names.empty()) return OkStatus();
  MOE_RETURN_IF_ERROR(committer_.DeleteWorkers(names));  // stored first: refused, all stay
  std::set<std::string> nodes;
  for (const std::string& name : names) {
    const WorkerEntry* w = workers_.Find(name);
    if (w == nullptr) continue;  // gone while the write waited
    nodes.insert(w->info.node());
    if (w->busy()) attempts_.RankLost(name, "worker " + name + " " + why);
    workers_.Remove(name);
    if (names.size() <= 16) MOE_LOG(INFO) << "worker " << name << " removed: " << why;
  }
  if (names.size() > 16) MOE_LOG(INFO) << names.size() << " workers removed: " << why;
  for (const std::string& node : nodes) DropCredentialIfNodeEmpty(node);
  attempts_.NeedSchedule();
  return OkStatus();
}

void Controller::DropCredentialIfNodeEmpty(const std::string& node) {
  if (node.empty() || !workers_.OnNode(node).empty()) return;
  const std::optional<moe::v1::NodeCredential> c = credentials_.ValidOf(node);
  if (!c) return;
  if (Status st = committer_.DeleteNodeCredential(c->sha256()); !st.ok()) {
    MOE_LOG(WARNING) << "node " << node << ": its credential stays (the store refused: " << st
                     << ")";
    return;
  }
  credentials_.Drop(c->sha256());
  MOE_LOG(INFO) << "node " << node
                << ": its last worker was forgotten, its credential dropped (it may bootstrap "
                   "again)";
}

Status Controller::CheckWorkerQuotas(const moe::v1::Register& reg, size_t fresh,
                                     const WorkerIdentity& id) {
  if (fresh == 0) return OkStatus();
  if (workers_.live() + registrations_.reserved() + fresh > config_.max_workers) {
    return ResourceExhaustedError("register: this controller holds " +
                                  std::to_string(workers_.live()) +
                                  " live workers (devices), its limit (moe-controller "
                                  "--max-workers)");
  }
  if (id.node.empty()) return OkStatus();
  const std::set<std::string>& on = workers_.OnNode(id.node);
  const size_t after = on.size() + fresh;
  if (after <= config_.max_devices_per_node) return OkStatus();
  std::vector<std::pair<double, std::string>> lost;  // room: lost, rankless, oldest first
  for (const std::string& name : on) {
    const WorkerEntry* w = workers_.Find(name);
    if (w->lost && w->channel == nullptr && !w->busy() && !w->lost_with_rank)
      lost.emplace_back(w->lost_at, name);
  }
  const size_t need = after - config_.max_devices_per_node;
  if (lost.size() < need) {
    return ResourceExhaustedError(
        "register: node " + id.node + " holds " + std::to_string(on.size()) + " workers and " +
        reg.name() + " adds " + std::to_string(fresh) + ": over its limit of " +
        std::to_string(config_.max_devices_per_node) + " (moe-controller --max-devices-per-node)");
  }
  std::sort(lost.begin(), lost.end());
  std::vector<std::string> names;
  for (size_t i = 0; i < need; ++i) names.push_back(lost[i].second);
  return ForgetWorkers(names, "forgotten to make room for node " + id.node +
                                  "'s new workers (--max-devices-per-node)");
}

}  // namespace moe::controller
