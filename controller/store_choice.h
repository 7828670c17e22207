// The controller's durable store as --store names it (docs/operations.md, "A standby controller"):
//
//   sqlite (default)   <--state-dir>/controller.db, the directory locked: one controller, no
//   standby etcd://h:p,.../pfx the records in etcd (etcd_store.h); this controller serves once it
//   leads
//                      (leader_election.h), and until then refuses every call with the leader's
//                      address (standby_server.h)
//
// main.cc opens it before building the Controller; the Controller sees a StateStore either way.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "controller/config.h"
#include "controller/etcd_client.h"
#include "controller/etcd_store.h"
#include "controller/leader_election.h"
#include "controller/net_policy.h"
#include "controller/state_store.h"

namespace moe::controller {

struct OpenedStore {
  StateStore* store = nullptr;  // what the Controller writes to (one of those below)
  std::optional<StateDirLock> lock;
  std::unique_ptr<SqliteStateStore> sqlite;
  std::unique_ptr<EtcdClient> etcd;
  std::unique_ptr<LeaderElection> election;
  std::unique_ptr<EtcdStateStore> etcd_store;
  std::string where;  // for the logs: "<dir>" or "etcd://..."
};

// What a standby reports while it waits (main.cc: the log, /readyz, the leader gauge).
struct StandbyHooks {
  std::function<bool()> stop;                         // give up waiting (SIGTERM)
  std::function<void(const std::string&)> on_leader;  // the leader now ("" none)
};

bool IsEtcdStore(const std::string& store);
// --store sqlite: the state directory checked, locked and opened.
StatusOr<OpenedStore> OpenSqliteStore(const ControllerConfig& c);
// --store etcd://...: refuses calls on --listen until this controller leads, then opens the store
// under its fence. Returns once leading (or CANCELLED when hooks.stop() said so).
StatusOr<OpenedStore> LeadOnEtcd(const ControllerConfig& c, const StandbyHooks& hooks);

}  // namespace moe::controller
