#include "controller/store_choice.h"

#include <unistd.h>

#include "common/log.h"
#include "controller/standby_server.h"

namespace moe::controller {

namespace {

// --advertise-address, or --listen with a wildcard host replaced by this machine's name.
std::string AdvertisedAddress(const ControllerConfig& c) {
  if (!c.advertise_address.empty()) return c.advertise_address;
  const std::string& listen = c.server.listen;
  const size_t colon = listen.rfind(':');
  const std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]") {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    return std::string(name) + listen.substr(colon == std::string::npos ? listen.size() : colon);
  }
  return listen;
}

}  // namespace

bool IsEtcdStore(const std::string& store) { return store.rfind("etcd://", 0) == 0; }

StatusOr<OpenedStore> OpenSqliteStore(const ControllerConfig& c) {
  if (c.state_dir.empty()) {
    return InvalidArgumentError(
        "--state-dir is required with the embedded store (--store sqlite, the default); or name "
        "--store etcd://host:port for a controller with standbys");
  }
  OpenedStore out;
  out.where = c.state_dir;
  if (Status st = CheckStateDirFilesystem(c.state_dir, c.allow_network_state_dir); !st.ok()) {
    return InvalidArgumentError("--state-dir: " + st.message());
  }
  auto lock = LockStateDir(c.state_dir);
  if (!lock.ok()) return InvalidArgumentError("--state-dir: " + lock.status().message());
  out.lock.emplace(std::move(*lock));
  auto store = SqliteStateStore::Open(c.state_dir);
  if (!store.ok()) return Status(store.status().code(), "--state-dir: " + store.status().message());
  if (Status st = out.lock->LockDatabase(); !st.ok()) {
    return Status(st.code(), "--state-dir: " + st.message());
  }
  out.sqlite = std::move(*store);
  out.store = out.sqlite.get();
  return out;
}

StatusOr<OpenedStore> LeadOnEtcd(const ControllerConfig& c, const StandbyHooks& hooks) {
  if (c.leader_lease_seconds < 2 || c.leader_lease_seconds > 60) {
    return InvalidArgumentError("--leader-lease-seconds " + std::to_string(c.leader_lease_seconds) +
                                ": expected 2 to 60 (etcd grants no lease under 2 s)");
  }
  MOE_ASSIGN_OR_RETURN(const EtcdTarget target, ParseEtcdUrl(c.store));
  OpenedStore out;
  out.where = c.store;
  out.etcd = std::make_unique<EtcdClient>(target);
  const std::string me = AdvertisedAddress(c);
  out.election = std::make_unique<LeaderElection>(*out.etcd, me, c.leader_lease_seconds);
  StandbyServer standby(me);
  if (Status st = standby.Start(c.server); !st.ok()) {
    return Status(st.code(), "--listen: " + st.message());
  }
  MOE_LOG(INFO) << "moe-controller " << me << ": standby on " << c.store
                << " until it leads (calls on " << c.server.listen << " are refused until then)";
  StatusOr<EtcdFence> fence = out.election->Campaign(hooks.stop, [&](const std::string& leader) {
    standby.SetLeader(leader);
    hooks.on_leader(leader);
  });
  standby.Shutdown();  // the real server takes the port
  if (!fence.ok()) return fence.status();
  MOE_LOG(INFO) << "moe-controller " << me << " leads (" << out.election->key()
                << " created at revision " << fence->revision << ", lease " << out.election->lease()
                << ", " << c.leader_lease_seconds << " s)";
  out.etcd_store = std::make_unique<EtcdStateStore>(*out.etcd, *fence);
  out.store = out.etcd_store.get();
  return out;
}

}  // namespace moe::controller
