// Fake mode's node agents (moe-worker --fake-step-seconds, what bench/load.py loads the controller
// with): N agents in one process on gRPC's callback API. No thread per agent: gRPC's own threads
// read every stream and send what is queued on it (a FakeSession each), and one timer thread sends
// the heartbeats, the fake ranks' steps and the reconnects when they are due. A thread per agent on
// gRPC's synchronous client read its answers 2-8 s late in a herd of 16,384 on one core, so the
// fake side, not the controller, set the benchmark's edge.
//
// Each agent speaks the node agent's protocol (agent.h): it registers with its devices, the ranks
// it runs and the outcomes the controller has not heard; heartbeats by UDP (on the stream until a
// datagram is acknowledged); an assignment is a fake rank that reports a synthetic step every
// --fake-step-seconds until the job's steps are done (a success with its final checkpoint) or it is
// cancelled; a cancel, a log request (a fake rank writes no output), the controller's checkpoint
// root, a herd's "retry after", a standby's refusal, a revoked or unknown credential. A clean stop
// (Leave) tells the controller, stops the fake ranks and reports them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "moe/v1/worker_service.grpc.pb.h"
#include "worker/agent/agent.h"
#include "worker/agent/fake_session.h"

namespace moe::worker {

// How the fake nodes of one process are laid out: racks of `rack_size` nodes (0: one rack), and
// `per_connection` agents sharing each TCP connection to the controller (1: each its own, as real
// node agents have).
struct FakeLayout {
  int rack_size = 0, per_connection = 1;
};

// An agent as the health endpoint shows it.
struct AgentView {
  std::string name, node, rack, controller;
  AgentState state;
};

class FakeFleet final : public FakeSessionOwner {
 public:
  // `n` agents of base's devices; n > 1: named <name>-<i>, each its own node, on racks of
  // layout.rack_size nodes (<rack>-<i / rack_size>).
  FakeFleet(const AgentOptions& base, int n, const FakeLayout& layout);
  ~FakeFleet() override;
  FakeFleet(const FakeFleet&) = delete;
  FakeFleet& operator=(const FakeFleet&) = delete;

  // Runs every agent until Stop(); returns the first fatal error of any (the fleet then stops).
  Status Run();
  void Stop();
  // A clean stop (SIGTERM): every agent says it is leaving, its fake ranks stop and are reported,
  // then (their messages sent, at most 2 s) Stop().
  void Leave(const std::string& reason);
  std::vector<AgentView> Views();

  // From the agents' sessions (gRPC's threads).
  void OnMessage(int agent, FakeSession* s, const moe::v1::ControllerMessage& m) override;
  void OnEnded(int agent, FakeSession* s, const grpc::Status& st, bool answered,
               std::vector<moe::v1::WorkerMessage> unsent) override;

 private:
  struct Agent;
  struct Rank;
  enum class Due { kConnect, kBeat, kStep };
  struct Event {
    double at;
    int agent;
    Due what;
    int device;      // kStep: the rank's device
    uint64_t token;  // kStep: the rank's id; kBeat: the session's
    bool operator>(const Event& o) const { return at > o.at; }
  };

  void Schedule(const Event& e);
  void TimerLoop();
  void Fire(const Event& e);
  void Connect(Agent& a);
  void Beat(Agent& a, uint64_t session);
  void Step(Agent& a, int device, uint64_t id);
  void Registered(Agent& a, FakeSession* s, const moe::v1::Registered& r);
  void Assign(Agent& a, const moe::v1::Assignment& asg);
  void CancelRanks(Agent& a, const std::string& job, int attempt);
  void ServeLogs(Agent& a, const moe::v1::LogRequest& req);
  // Sends on the agent's session, or keeps a rank's outcome for its next registration. With a.mu.
  void Report(Agent& a, const moe::v1::RankFinished& f);
  bool Send(Agent& a, const moe::v1::WorkerMessage& m);
  // Sends the step reports kept since the last (StepReports: one message for the node). With a.mu.
  void FlushSteps(Agent& a);
  void Registration(Agent& a, moe::v1::Register* r);
  bool AcceptEpoch(int64_t epoch, const std::string& what);
  void SetUdpLease(Agent& a, const moe::v1::Registered& r);
  double RetryWait(Agent& a, const grpc::Status& st, bool answered);
  void Fatal(const Status& st);
  void Unreachable(Agent& a, const grpc::Status& st);
  void DeleteEnded();
  static double Now();

  const double step_seconds_;
  const int per_connection_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> max_epoch_{0};
  std::atomic<uint64_t> next_id_{1};
  std::mutex mu_;  // the timer's queue, the fatal error, the live and the ended sessions
  std::condition_variable wake_, sessions_done_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> due_;
  Status fatal_;
  int live_sessions_ = 0;  // started and not ended (OnEnded)
  // Ended: deleted off gRPC's threads (FakeSessionOwner::OnEnded says why).
  std::vector<FakeSession*> ended_;
  // Agents that could not reach the controller since it was last reached, logged every 30 s.
  int64_t unreachable_ = 0;
  double unreachable_logged_ = -1e9;
  std::vector<std::shared_ptr<moe::v1::WorkerService::Stub>> pooled_;  // by connection group
};

}  // namespace moe::worker
