// The workers the controller knows: their topology, leases, and what each runs.
// Not thread-safe: the Controller serialises calls under its mutex.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/clock.h"
#include "controller/scheduler.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

// How the controller talks to one connected worker (its stream). Send must not block.
class WorkerChannel {
 public:
  virtual ~WorkerChannel() = default;
  virtual void Send(const moe::v1::ControllerMessage& msg) = 0;
};

struct WorkerEntry {
  moe::v1::Worker info;        // name, rack, node, device, address, registered_at
  WorkerChannel* channel = nullptr;  // null while disconnected
  double lease_deadline = 0;   // monotonic
  bool lost = false;
  bool drained = false;
  std::string job_id;          // the rank it runs, if any
  int attempt = 0;
  int rank = -1;
  int cpu_cores = 0;
  std::string host_id;
  bool busy() const { return !job_id.empty(); }
};

class WorkerRegistry {
 public:
  WorkerRegistry(Clock& clock, double lease_seconds) : clock_(clock), lease_(lease_seconds) {}

  // A worker (re)connects. A name already held by a connected, live worker is refused.
  StatusOr<WorkerEntry*> Register(const moe::v1::Register& reg, WorkerChannel* channel);
  void Heartbeat(const std::string& name);
  // The stream ended. Only the channel that is current counts (a reconnect may have replaced it).
  // Returns true when the worker became lost now.
  bool Disconnected(const std::string& name, WorkerChannel* channel);
  // Workers whose lease ran out since the last call.
  std::vector<std::string> ExpireLeases();

  WorkerEntry* Find(const std::string& name);
  void Assign(const std::string& name, const std::string& job_id, int attempt, int rank);
  void Release(const std::string& name);
  Status SetDrained(const std::string& name, bool drained);

  // Slots for the scheduler: free ones (connected, live, not drained, idle) and every live one.
  std::vector<Slot> FreeSlots() const;
  std::vector<Slot> LiveSlots() const;
  std::vector<moe::v1::Worker> List() const;
  // Threads for a CPU rank on `name`'s node: its cores over the live CPU workers there (0: unknown).
  int CpuThreadsFor(const std::string& name) const;
  moe::v1::Worker Describe(const WorkerEntry& w) const;
  const std::map<std::string, WorkerEntry>& all() const { return workers_; }

 private:
  Clock& clock_;
  double lease_;
  std::map<std::string, WorkerEntry> workers_;
};

}  // namespace moe::controller
