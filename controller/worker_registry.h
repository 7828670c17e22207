// The workers the controller knows: their topology, leases, and what each runs.
// Not thread-safe: the Controller serialises calls under its mutex.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/clock.h"
#include "controller/lease_book.h"
#include "controller/scheduler.h"
#include "moe/v1/job_service.pb.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

// How the controller talks to one connected worker (its stream). Send must not block.
class WorkerChannel {
 public:
  virtual ~WorkerChannel() = default;
  virtual void Send(const moe::v1::ControllerMessage& msg) = 0;
  // Ends the stream (ABORTED, `why`): a newer registration of its names replaced it. Its messages
  // from then on are dropped. Called under the controller's lock: it only queues.
  virtual void Close(const std::string& why) { (void)why; }
};

// One device of a node agent: what ranks are placed on (worker_claims.h, DeviceWorkerName). The
// agent's devices share its channel, lease and session.
struct WorkerEntry {
  moe::v1::Worker info;              // name, rack, node, device, address, registered_at, agent
  WorkerChannel* channel = nullptr;  // null while disconnected
  bool lost = false;
  // Lost while it ran a rank: that rank may still run on its host (a partition, a hung agent), so
  // the worker keeps its share of the host's memory and cores until it registers again (and says
  // what it runs) or is forgotten. Its co-hosted workers' memory was re-split without it, and a job
  // refused at submit for its share was placed and grew past it.
  bool lost_with_rank = false;
  bool root_offered = false;  // offered the controller's checkpoint root at its registration
  bool drained = false;
  bool leaving = false;  // said it is stopping cleanly (Leaving): no new work, removed when it goes
  double lost_at = 0;    // monotonic second it became lost (pruned after the retention)
  std::string job_id;    // the rank it runs, if any
  int attempt = 0;
  int rank = -1;
  int cpu_cores = 0;
  int64_t memory_bytes = 0;  // as registered: a CPU worker's host, a GPU worker's device
  std::string host_id;
  // The worker's credential (Registered.session): its name is held by it while the worker is
  // connected, and until held_until (monotonic) after it was last heard from.
  std::string session;
  double held_until = 0;
  std::string agent;         // the node agent it belongs to (info.agent())
  double report_window = 0;  // monotonic second the step reports below were counted in
  int reports_in_window = 0;
  bool busy() const { return !job_id.empty(); }
};

// One rack (NVLink domain) as the registry knows it: moectl get racks, moe_rack_spares*.
struct RackCount {
  int workers = 0;  // registered, lost ones included
  int idle = 0;     // as Describe says: IDLE, BUSY (drained ones are draining), LOST
  int busy = 0;
  int draining = 0;  // drained (idle or still running its rank) or leaving: no new work
  int lost = 0;
  // Spares (--spares-per-rack N, per device type): idle placeable workers held back from new jobs
  // now (at most N of a type), and busy ones beyond the rack's share for new jobs (its placeable
  // workers less N): ranks a restart put on a spare, or that run on the reserve because the rack
  // lost healthy workers under them. The two add up to N a type while the rack has N placeable.
  int spares = 0;
  int spares_in_use = 0;
};

class WorkerRegistry {
 public:
  WorkerRegistry(Clock& clock, double lease_seconds)
      : clock_(clock), lease_(lease_seconds), leases_(clock, lease_seconds) {}

  // A node agent (re)connects with its devices (DeviceRegistrations). A name held by another
  // session is refused: ALREADY_EXISTS while that worker is connected, PERMISSION_DENIED until its
  // hold ends (a lease after it was last heard from). A registration presenting the agent's session
  // keeps it; any other gets a fresh session. Admit checks (claims, the names) and returns the
  // session the agent's devices will hold: its own when it presented it, else a fresh one; Register
  // then records each device (the Controller stores a new session in between, so a refused write
  // changes nothing here).
  //
  // `node` is the node credential's node where the caller has one (node_credentials.h): then every
  // name must be new or that node's (PERMISSION_DENIED otherwise, live or silent), and a
  // registration without a session takes the names over from the node's earlier session (a
  // restarted agent: the Controller closes the old stream, and the ranks the new one does not
  // report are lost); one presenting a session that is not the names' current one was superseded
  // (ABORTED: that agent stops). Without a node (no tokens), the holds above.
  StatusOr<std::string> Admit(const moe::v1::Register& agent,
                              const std::vector<moe::v1::Register>& devices, WorkerChannel* channel,
                              const std::string& node = "") const;
  WorkerEntry* Register(const moe::v1::Register& device, WorkerChannel* channel,
                        const std::string& session);
  // Admit and Register every device at once (tests, and callers with nothing to store); the first
  // device's entry.
  StatusOr<WorkerEntry*> Register(const moe::v1::Register& agent, WorkerChannel* channel);
  // The agent's devices, in their order (empty for an unknown agent).
  const std::vector<std::string>& DevicesOf(const std::string& agent) const;
  // The agent's device that runs (job, attempt, rank): the attempt's own when the agent holds it,
  // else one busy with it, else the agent's first (a stale rank's outcome: nothing to release).
  std::string WorkerFor(const std::string& agent, const std::string& job_id, int attempt,
                        int rank) const;
  // A worker known from the store (after a controller restart): lost, its name held by `session`
  // for `hold_seconds` so that only it can come back under that name.
  void Restore(const moe::v1::Worker& info, const std::string& session, double hold_seconds);
  // The connected, live devices of the agent whose credential is `session`; empty when none.
  std::vector<const WorkerEntry*> FindBySession(const std::string& session) const;
  // Renews the agent's lease; false when its devices were declared lost (a lease that expired is
  // not renewed: the agent registers again).
  bool Heartbeat(const std::string& agent);
  // The leases, for the heartbeat path that takes no controller lock (LeaseBook is thread-safe).
  LeaseBook& leases() { return leases_; }
  // Step reports a worker may send: at most kMaxStepReportsPerSecond in any second (one rank
  // reports once a step); the rest are dropped, the next report replacing them.
  static constexpr int kMaxStepReportsPerSecond = 100;
  // (Per device: an agent of N devices may send N times as many.)
  bool AllowStepReport(const std::string& agent);
  // The agent's stream ended. Only the channel that is current counts (a reconnect may have
  // replaced it). Returns its devices that became lost now.
  std::vector<std::string> Disconnected(const std::string& agent, WorkerChannel* channel);
  // Workers (devices) whose agent's lease ran out since the last call.
  std::vector<std::string> ExpireLeases();

  WorkerEntry* Find(const std::string& name);
  void Assign(const std::string& name, const std::string& job_id, int attempt, int rank);
  void Release(const std::string& name);
  Status SetDrained(const std::string& name, bool drained);
  void SetLeaving(const std::string& name);
  // The agent's devices also allow `root` for checkpoints (the controller's own checkpoint root,
  // which a worker on default roots reported mounted, or which is on the controller's own host).
  void AddCheckpointRoot(const std::string& agent, const std::string& root);
  void RemoveCheckpointRoot(const std::string& agent, const std::string& root);
  // Forgets the worker (it left, was deleted, or was lost longer than the retention).
  void Remove(const std::string& name);
  // Lost workers, not connected, lost for longer than `seconds`.
  std::vector<std::string> LostLongerThan(double seconds) const;

  // Slots for the scheduler: free ones (connected, live, not drained or leaving, idle) and every
  // live one that is not leaving.
  std::vector<Slot> FreeSlots() const;
  std::vector<Slot> LiveSlots() const;
  // Whether the worker could take new work once free: connected, not lost, drained or leaving.
  bool Placeable(const std::string& name) const;
  std::vector<moe::v1::Worker> List() const;
  // The workers named after `after` (by name), at most `limit` of them and `max_bytes` (at least
  // one), into `resp`; its next_page_token when more follow. Describes only the page's workers.
  void Page(const std::string& after, size_t limit, size_t max_bytes,
            moe::v1::ListWorkersResponse* resp) const;
  // Workers per (state, rack), the states as Describe names them in lower case ("draining": drained
  // and still busy): /metrics' moe_workers, counted without listing every worker.
  std::map<std::pair<std::string, std::string>, int> CountByStateAndRack() const;
  // Per rack, with the spares `spares_per_rack` holds back (QueueScheduler: WithoutSpares on the
  // free slots). Spares are a count, not fixed workers: whichever idle ones are left are spares.
  std::map<std::string, RackCount> CountByRack(int spares_per_rack) const;
  // Threads for a CPU rank on `name`'s node: its cores over the live CPU workers there (0:
  // unknown).
  int CpuThreadsFor(const std::string& name) const;
  // Memory one rank on the worker may use: a CPU worker's share of its host, a GPU worker's device;
  // 0 when it reported none.
  int64_t MemoryFor(const std::string& name) const;
  // The live worker of that kind (CPU, or a GPU: cuda*) with the most memory a rank may use (bytes
  // 0: none reports any), as of the last change of the workers: a submit's memory check asks on
  // every call, and a walk over every device each time cost 55 ms at 65,536 devices.
  struct Roomy {
    uint64_t version = ~uint64_t{0};
    int64_t bytes = 0;
    std::string name;
  };
  const Roomy& Roomiest(bool cpu) const;
  moe::v1::Worker Describe(const WorkerEntry& w) const;
  const std::map<std::string, WorkerEntry>& all() const { return workers_; }
  // Workers not lost (what --max-workers limits: lost ones count toward no limit).
  size_t live() const { return workers_.size() - lost_count_; }
  // The workers registered with `node` (live and lost).
  const std::set<std::string>& OnNode(const std::string& node) const;

 private:
  Status CheckNameFree(const moe::v1::Register& reg, WorkerChannel* channel) const;
  Status CheckNameOfNode(const moe::v1::Register& reg, const std::string& node) const;
  void SetLost(WorkerEntry& w, bool lost);  // keeps lost_count_
  void IndexNode(const std::string& name, const std::string& old_node, const std::string& new_node);
  void MarkLost(WorkerEntry& w);
  int CpuWorkersSharingHost(
      const WorkerEntry& of) const;             // live CPU workers on its machine, itself included
  void Share(const WorkerEntry& w, int delta);  // w in or out of per_node_ and per_host_

  Clock& clock_;
  double lease_;
  LeaseBook leases_;                                        // one per agent
  std::map<std::string, std::vector<std::string>> agents_;  // agent -> its devices' workers
  std::map<std::string, std::string> by_session_;           // session -> agent
  std::map<std::string, int> per_node_,
      per_host_;  // live CPU workers, and lost ones with a rank (Share)
  std::map<std::string, WorkerEntry> workers_;
  std::map<std::string, std::set<std::string>> by_node_;  // node -> its workers (OnNode)
  size_t lost_count_ = 0;
  // Bumped by every change a worker's memory share or liveness follows from (Roomiest's cache).
  uint64_t memory_version_ = 0;
  mutable Roomy roomiest_[2];  // CPU, GPU
};

}  // namespace moe::controller
