// The worker agent: one per node, serving its devices (the GPUs of --devices, or the --slots of a
// CPU node; one device is the N = 1 case). Keeps one stream to the controller (register,
// heartbeat every second, step reports, rank outcomes one way; assignments and cancels the other),
// and runs each assigned rank on the device the assignment names as a child process (moe-train in
// rank mode, through common/rank_process.h), so that a crashed rank, a sticky CUDA error or an
// aborted communicator dies with the attempt and never poisons the agent. The controller lists and
// places each device as a worker of its own (<agent>/<index>); they share this agent's connection,
// lease and session.
//
// Threads: Run's thread reads the controller's stream and starts/cancels ranks; one heartbeat
// thread per session; one monitor thread per rank (reads its reports and output, reaps it), joined
// before the next rank starts on its device and when the agent stops. Nothing is detached.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/grpc_client.h"
#include "common/mutex.h"
#include "common/rank_process.h"
#include "common/status.h"
#include "moe/v1/worker_service.grpc.pb.h"
#include "worker/agent/node_credential.h"
#include "worker/agent/rank_log.h"
#include "worker/agent/rendezvous_proxy.h"
#include "worker/agent/udp_beat_link.h"

namespace moe::worker {

struct AgentOptions {
  ClientOptions client;
  std::string name;
  std::string rack, node;
  // The devices it serves, one rank each: cuda:N for GPUs, "cpu" once per CPU slot.
  std::vector<std::string> devices = {"cpu"};
  std::string address = "127.0.0.1";  // where this worker's rank can be reached by its peers (Gloo)
  std::string trainer;                // path of moe-train
  std::string runtime_dir;            // spec files and rendezvous sockets
  // Where the node credential is kept (node_credential.h); "":
  // <runtime_dir>/node-<node>.credential.
  std::string node_credential_file;
  int threads = 0;                 // CPU threads for the rank (0: the trainer's default)
  double memory_gb = 0;            // memory a rank may use (0: cpu: the host's; cuda: not reported)
  double stop_grace_seconds = 30;  // a cancelled rank gets this long to stop, then SIGKILL
  // Every path a job names must lie under one of these (common/path_roots.h); empty: anywhere.
  std::vector<std::string> data_roots, checkpoint_roots;
  // checkpoint_roots are the defaults (no --checkpoint-root, no $MOE_CHECKPOINT_ROOT): the
  // controller's checkpoint root is accepted as well where it is mounted here.
  bool default_checkpoint_roots = false;
  std::vector<std::string> extra_trainer_args;  // testing hooks (e.g. --inject-step-delay)
  // Fake mode (load tests, bench/load): > 0 runs no trainer; an assigned rank reports a synthetic
  // step every this many seconds until the job's steps are done or it is cancelled. Fake mode's
  // agents are FakeFleet's (fake_fleet.h), not WorkerAgents.
  double fake_step_seconds = 0;
};

// What the agent's health endpoint and /metrics show (main's --health-listen).
struct AgentState {
  bool registered = false;    // a session with the controller is up
  bool leaving = false;       // a clean stop is under way
  int devices = 0;            // devices served
  int ranks_running = 0;      // ranks whose process still runs
  int64_t registrations = 0;  // sessions the controller accepted since start (reconnects + 1)
  int64_t ranks_started = 0;  // ranks started since start
};

class WorkerAgent {
 public:
  explicit WorkerAgent(AgentOptions options);
  ~WorkerAgent();
  // Runs until Stop(): connects, reconnects with backoff, serves assignments.
  Status Run();
  void Stop();
  // A clean stop (the worker's SIGTERM): tells the controller it is leaving (no new work; its jobs
  // are requeued without using a restart), stops its ranks at the next step boundary (where they
  // checkpoint), reports their ends, then Stop()s. Blocks until the ranks ended (at most the stop
  // grace; a rank is killed after it).
  void Leave(const std::string& reason);
  // Thread-safe snapshot for the health endpoint.
  AgentState State();
  const AgentOptions& options() const { return o_; }

 private:
  std::string PeakCachePath(int threads) const;  // <runtime-dir>/cpu-peak-t<threads>.txt
  void MeasurePeakAhead();
  struct Rank;
  // One connection to the controller; true when its channel is worth keeping for the next (the
  // controller refused the registration for a herd: come back on the same connection).
  bool Session(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub);
  bool Write(const moe::v1::WorkerMessage& msg);
  bool Credential(moe::v1::WorkerService::Stub& stub);
  void NextController(std::shared_ptr<moe::v1::WorkerService::Stub>* stub);
  // The stream for the Run thread's reads: gRPC allows one reader beside the writers, and only the
  // Run thread replaces stream_, so on it the pointer needs no lock.
  grpc::ClientReaderWriter<moe::v1::WorkerMessage, moe::v1::ControllerMessage>* ReaderStream()
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stream_.get();
  }
  void Registration(moe::v1::Register* r);
  void ServeSession(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub);
  void StartRank(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub,
                 moe::v1::Assignment a);  // a copy: its data path is resolved here
  StatusOr<std::vector<std::string>> RankArgs(const Rank& rank) const;
  Status CheckPaths(const moe::v1::Assignment& a) const;
  // The agent's checkpoint roots and, once accepted, the controller's.
  std::vector<std::string> CheckpointRoots() const;
  // Registered.checkpoint_root offered: taken when it is an absolute directory here that this
  // process may write, and the answer (CheckpointRootMounted) sent.
  void AcceptCheckpointRoot(const std::string& root);
  void ServeLogs(const moe::v1::LogRequest& req);  // FAILED_PRECONDITION naming the field and roots
  // Stops the ranks of that attempt that run here: at their next step boundary (they checkpoint
  // there), killed after the stop grace; `now`: killed at once.
  void CancelRank(const std::string& job_id, int attempt, const std::string& reason, bool now);
  void Adopt(const std::shared_ptr<Rank>& rank, void (WorkerAgent::*monitor)(Rank*));
  void Monitor(Rank* rank);
  void Report(const moe::v1::RankFinished& f);
  // A rank's step report, sent with its node's other ranks' of the moment (StepReports).
  void SendStep(moe::v1::StepReport report);
  void FlushSteps();
  void FlushStepsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_steps_mu_);
  static constexpr std::chrono::milliseconds kStepGather{20};
  // Stops the rank on `device` (-1: on every device) and joins its monitor.
  void StopRanks(int device);

  bool AcceptEpoch(int64_t epoch, const std::string& what);
  // UDP heartbeats (worker/agent/udp_beat_link.h): the lease Registered granted (none: stream
  // only).
  void SetUdpLease(const moe::v1::Registered& r);
  // Sends this beat's datagram; true when the controller acknowledged one of the last two, so the
  // datagram is the heartbeat (else the stream carries one as well).
  bool UdpBeat();
  void NoteLateAnswer() const;
  void SendLeaving();
  std::string LeaveReason();

  AgentOptions o_;
  NodeCredential credential_;  // o_.client.token is its token once Credential() succeeded
  std::chrono::steady_clock::time_point credential_logged_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> leaving_{false};
  std::atomic<bool> registered_{false};    // Registered received on the current session
  std::atomic<int64_t> registrations_{0};  // Registered messages accepted
  std::atomic<int64_t> ranks_started_{0};  // rank processes started
  std::chrono::steady_clock::time_point registration_sent_;  // when our Register left
  // Connects that failed since the last one that worked, and when the last of them was logged: an
  // outage is logged at its first failure and then every 30 s, not at every retry (16,384 agents
  // retrying each second logged 2,000 lines a second and starved a restarting controller's core).
  int64_t unreachable_ = 0;
  std::chrono::steady_clock::time_point unreachable_logged_;
  double retry_after_ = 0;  // seconds the controller asked us to wait before registering again
  Status fatal_;  // why Run gave up (a name another live worker holds); set on Run's thread
  Mutex ranks_mu_;
  std::string leave_reason_ ABSL_GUARDED_BY(ranks_mu_);  // set with leaving_
  Mutex stop_rank_mu_;                                   // one StopRanks at a time (it joins the
                                                         // monitors)
  Mutex stream_mu_;                                      // the stream and its writes
  std::unique_ptr<grpc::ClientReaderWriter<moe::v1::WorkerMessage, moe::v1::ControllerMessage>>
      stream_ ABSL_GUARDED_BY(stream_mu_);
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(stream_mu_) = nullptr;
  std::atomic<int64_t> max_epoch_{0};  // the highest controller epoch seen (AcceptEpoch)
  std::atomic<double> heartbeat_seconds_{
      1.0};       // set by the Run thread (Registered), read by the heartbeat thread
  Mutex udp_mu_;  // the UDP lease: set by the Run thread, used by the heartbeat thread
  std::shared_ptr<UdpBeatLink> udp_link_ ABSL_GUARDED_BY(udp_mu_);
  uint64_t udp_lease_ ABSL_GUARDED_BY(udp_mu_) = 0;
  uint64_t udp_seq_ ABSL_GUARDED_BY(udp_mu_) = 0;

  // This worker's credential from its registration (Registered.session): presented again when it
  // reconnects and, by the rendezvous proxies, on every key-value call.
  std::shared_ptr<SessionCredential> session_ = std::make_shared<SessionCredential>();

  // The controller's checkpoint root, when it offered it (default roots only) and it is mounted
  // here (AcceptCheckpointRoot, on the Run thread); read with the agent's own roots
  // (CheckpointRoots).
  mutable Mutex roots_mu_;
  std::string controller_checkpoint_root_ ABSL_GUARDED_BY(roots_mu_);

  Mutex send_steps_mu_ ABSL_ACQUIRED_BEFORE(steps_mu_);  // a flush's take and write; Report's
  Mutex steps_mu_;                                       // SendStep's gathering
  std::vector<moe::v1::StepReport> steps_ ABSL_GUARDED_BY(steps_mu_);
  // By device index: the last rank started there.
  std::map<int, std::shared_ptr<Rank>> ranks_ ABSL_GUARDED_BY(ranks_mu_);
  // Outcomes the controller has not heard yet.
  std::vector<moe::v1::RankFinished> unreported_ ABSL_GUARDED_BY(ranks_mu_);
};

// A rank this agent runs: its session (agent.cc) and its rank runner (agent_ranks.cc) share it.
struct WorkerAgent::Rank {
  moe::v1::Assignment assignment;
  int device = 0;    // its place in AgentOptions::devices
  std::string name;  // the worker (device) it runs on, as the controller calls it
  std::string tag;   // <job>-a<attempt>-r<rank>: file names and log prefix
  std::unique_ptr<RankProcess> process;
  std::unique_ptr<RendezvousProxy> proxy;
  std::string spec_path;
  std::atomic<bool> done{false};
  std::atomic<bool> stop_asked{false};  // told to stop (CancelRank, StopRanks)
  std::thread monitor;
  std::unique_ptr<RankLogWriter> log;  // its output, for moectl logs
};

}  // namespace moe::worker
