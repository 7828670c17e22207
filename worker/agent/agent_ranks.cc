// The node agent's rank runner: a rank's paths checked and resolved, its process started with its
// rendezvous proxy, monitored, stopped and reported. The session: agent.cc.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/confined_dir.h"
#include "common/file_util.h"
#include "common/host_id.h"
#include "common/job_spec_proto.h"
#include "common/log.h"
#include "common/path_roots.h"
#include "common/rank_end.h"
#include "common/udp_beat.h"
#include "common/yaml.h"
#include "worker/agent/agent.h"
#include "worker/agent/heartbeat_ticker.h"
#include "worker/agent/rank_log.h"
#include "worker/agent/rank_messages.h"
#include "worker/agent/step_report.h"

namespace moe::worker {

void WorkerAgent::StopRanks(int device) {
  MutexLock stopping(&stop_rank_mu_);
  std::vector<std::shared_ptr<Rank>> stopping_ranks;
  {
    MutexLock lock(&ranks_mu_);
    for (const auto& [d, rank] : ranks_) {
      if (device < 0 || d == device) stopping_ranks.push_back(rank);
    }
  }
  for (const auto& r : stopping_ranks) {  // all told first: they checkpoint side by side
    if (r->done) continue;
    if (r->process) r->process->RequestStop(o_.stop_grace_seconds);
    r->stop_asked = true;
  }
  for (const auto& r : stopping_ranks) {
    if (r->monitor.joinable()) r->monitor.join();
  }
}

// Sends a rank's outcome now, or keeps it for the next registration.
// One rank's report waits up to kStepGather for its node's other ranks, which end the same step at
// about the same moment: the first to come sends them all (StepReports), one message for the node
// instead of one per device. An agent of one device sends at once.
void WorkerAgent::SendStep(moe::v1::StepReport report) {
  if (o_.devices.size() == 1) {
    moe::v1::WorkerMessage m;
    *m.mutable_step() = std::move(report);
    Write(m);
    return;
  }
  {
    MutexLock lock(&steps_mu_);
    steps_.push_back(std::move(report));
    if (steps_.size() > 1) return;  // the first one's thread sends it
  }
  std::this_thread::sleep_for(kStepGather);
  FlushSteps();
}

void WorkerAgent::FlushSteps() {
  MutexLock send(&send_steps_mu_);
  FlushStepsLocked();
}

// What waits, in messages of at most kMaxStepsPerMessage (the controller refuses a larger one and
// ends the stream). With send_steps_mu_: taking the reports and writing them is one step, so a
// rank's end (Report) cannot pass its last step taken but not yet written.
void WorkerAgent::FlushStepsLocked() {
  std::vector<moe::v1::StepReport> steps;
  {
    MutexLock lock(&steps_mu_);
    steps.swap(steps_);
  }
  for (size_t i = 0; i < steps.size(); i += kMaxStepsPerMessage) {
    moe::v1::WorkerMessage m;
    for (size_t k = i; k < std::min(steps.size(), i + kMaxStepsPerMessage); ++k)
      *m.mutable_steps()->add_reports() = std::move(steps[k]);
    Write(m);
  }
}

void WorkerAgent::Report(const moe::v1::RankFinished& f) {
  MutexLock send(&send_steps_mu_);
  FlushStepsLocked();  // a rank's last step before its end
  moe::v1::WorkerMessage m;
  *m.mutable_finished() = f;
  if (Write(m)) return;
  MutexLock lock(&ranks_mu_);
  unreported_.push_back(f);
}

Status WorkerAgent::CheckPaths(const moe::v1::Assignment& a) const {
  return CheckAssignmentPaths(a, o_.data_roots, CheckpointRoots());
}

std::vector<std::string> WorkerAgent::CheckpointRoots() const {
  std::vector<std::string> roots = o_.checkpoint_roots;
  MutexLock lock(&roots_mu_);
  if (!controller_checkpoint_root_.empty()) roots.push_back(controller_checkpoint_root_);
  return roots;
}

void WorkerAgent::AcceptCheckpointRoot(const std::string& root) {
  if (!o_.default_checkpoint_roots) return;
  if (root.empty()) {  // this controller offers none: one taken from an earlier controller goes
    MutexLock lock(&roots_mu_);
    controller_checkpoint_root_.clear();
    return;
  }
  const std::string why = UnusableRoot(root);
  bool same = false;  // a reconnect: logged before (the answer goes with every registration)
  {
    MutexLock lock(&roots_mu_);
    same = controller_checkpoint_root_ == (why.empty() ? root : "") && registrations_ > 0;
    controller_checkpoint_root_ = why.empty() ? root : "";
  }
  if (!same && why.empty()) {
    MOE_LOG(INFO) << "the controller's checkpoint root " << root
                  << " is mounted here: jobs that name no checkpoint directory write there";
  } else if (!same) {
    MOE_LOG(WARNING) << "the controller's checkpoint root " << root << " is not usable here ("
                     << why << "): jobs that name no checkpoint directory will not run here; "
                     << "give --checkpoint-root a directory this worker and the controller share";
  }
  Write(RootMounted(root, why));
}

StatusOr<std::vector<std::string>> WorkerAgent::RankArgs(const Rank& rank) const {
  const moe::v1::Assignment& a = rank.assignment;
  std::vector<std::string> args = {
      "--config",     rank.spec_path,
      "--rank",       std::to_string(a.rank()),
      "--rendezvous", "unix://" + rank.proxy->socket_path(),
      "--report-fd",  "3",
      "--hostname",   o_.address,
      "--device",     o_.devices[static_cast<size_t>(rank.device)]};  // the assignment's device
  if (a.resume() && !a.spec().spec().checkpoint().dir().empty()) args.push_back("--resume");
  // Where the rank may read and write (it opens its paths beneath these), and who it runs for (its
  // lead rank claims the checkpoint directory: one job per directory, the newest attempt only).
  for (const auto& r : o_.data_roots) args.insert(args.end(), {"--data-root", r});
  for (const auto& r : CheckpointRoots()) args.insert(args.end(), {"--checkpoint-root", r});
  args.insert(args.end(), {"--job-id", a.job_id(), "--job-name", a.spec().metadata().name(),
                           "--job-owner", a.owner(), "--epoch", std::to_string(a.epoch()),
                           "--attempt", std::to_string(a.attempt())});
  // Threads: --threads when given, else the controller's share of this node's cores.
  const int threads = o_.threads > 0 ? o_.threads : a.cpu_threads();
  if (threads > 0) args.insert(args.end(), {"--threads", std::to_string(threads)});
  // The CPU peak MFU is measured against: once per thread count on this worker, not in every rank's
  // start-up (half a second of SGEMM each).
  if (o_.devices[static_cast<size_t>(rank.device)] == "cpu")
    args.insert(args.end(), {"--peak-cache", PeakCachePath(threads)});
  args.insert(args.end(), o_.extra_trainer_args.begin(), o_.extra_trainer_args.end());
  return args;
}

namespace {

// The rendezvous socket of a rank: named by a hash of its tag, so that a long job name cannot push
// the path past sun_path's 108 bytes (main checks the runtime directory leaves room for it).
std::string SocketName(const std::string& tag) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : tag) h = (h ^ c) * 1099511628211ull;
  char name[32];
  std::snprintf(name, sizeof(name), "rv-%016llx.sock", static_cast<unsigned long long>(h));
  return name;
}

}  // namespace

void WorkerAgent::StartRank(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub,
                            moe::v1::Assignment a) {
  const int device = a.device_index();
  if (device < 0 || device >= static_cast<int>(o_.devices.size())) {
    return Report(NotRun(a, FailureClass::kTransient, StatusCode::kInvalidArgument,
                         "worker " + o_.name + " has no device " + std::to_string(device) +
                             " (it serves " + std::to_string(o_.devices.size()) + ")"));
  }
  // One rank at a time on a device: whatever still runs there (a stale attempt) stops first.
  StopRanks(device);
  if (leaving_) {  // assigned before the controller heard it: refuse, as a worker that could not
                   // start it
    return Report(NotRun(a, FailureClass::kTransient, StatusCode::kUnavailable,
                         "worker " + o_.name + " is leaving (" + LeaveReason() + ")"));
  }
  Status st = CheckPaths(a);
  if (!st.ok()) {  // the job cannot run here as specified: it fails at once
    MOE_LOG(ERROR) << "refusing rank " << a.rank() << " of " << a.job_id() << ": " << st.message();
    return Report(NotRun(a, FailureClass::kPermanent, StatusCode::kFailedPrecondition,
                         "worker " + o_.name + " refused the rank: " + st.message()));
  }
  auto rank = std::make_shared<Rank>();
  rank->assignment = a;
  rank->device = device;
  rank->name = a.worker().empty() ? o_.name : a.worker();
  rank->tag = a.job_id() + "-a" + std::to_string(a.attempt()) + "-r" + std::to_string(a.rank());
  rank->spec_path = JoinPath(o_.runtime_dir, rank->tag + ".json");
  auto start = [&]() -> Status {
    // The typed spec becomes the rank's document here, at the process boundary (moe-train reads
    // it).
    MOE_RETURN_IF_ERROR(WriteFileAtomic(rank->spec_path, ToJson(MessageToNode(a.spec()))));
    rank->proxy = std::make_unique<RendezvousProxy>(stub, o_.client,
                                                    JoinPath(o_.runtime_dir, SocketName(rank->tag)),
                                                    a.rendezvous_prefix(), session_);
    MOE_RETURN_IF_ERROR(rank->proxy->Start());
    RankCommand cmd;
    cmd.program = o_.trainer;
    MOE_ASSIGN_OR_RETURN(cmd.args, RankArgs(*rank));
    MOE_ASSIGN_OR_RETURN(rank->process, RankProcess::Start(cmd));
    return OkStatus();
  };
  if (Status st = start(); !st.ok()) {
    MOE_LOG(ERROR) << "cannot start rank " << a.rank() << " of " << a.job_id() << ": " << st;
    if (rank->proxy) rank->proxy->Stop();
    // This worker failed, not the job: a transient failure.
    return Report(NotRun(a, FailureClass::kTransient, st.code(),
                         "worker " + o_.name + " could not start the rank: " + st.message()));
  }
  MOE_LOG(INFO) << "started rank " << a.rank() << "/" << a.spec().spec().parallelism().world_size()
                << " of " << a.job_id() << " attempt " << a.attempt() << " (pid "
                << rank->process->pid() << ")";
  Adopt(rank, &WorkerAgent::Monitor);
}

// The rank is this worker's now: the controller hears it started, and `monitor` watches it on its
// own thread until it ends.
AgentState WorkerAgent::State() {
  AgentState s;
  s.registered = registered_;
  s.leaving = leaving_;
  s.devices = static_cast<int>(o_.devices.size());
  s.registrations = registrations_;
  s.ranks_started = ranks_started_;
  MutexLock lock(&ranks_mu_);
  for (const auto& [device, rank] : ranks_) s.ranks_running += rank && !rank->done;
  return s;
}

void WorkerAgent::Adopt(const std::shared_ptr<Rank>& rank, void (WorkerAgent::*monitor)(Rank*)) {
  ++ranks_started_;
  Write(AboutRank(rank->assignment, /*started=*/true));
  {
    MutexLock lock(&ranks_mu_);
    ranks_[rank->device] = rank;
  }
  rank->monitor = std::thread([this, r = rank.get(), monitor] { (this->*monitor)(r); });
}

// Streams the rank's step reports to the controller and its output to this agent's log until it
// ends, then reports how it ended (its final record, or its exit status when it sent none).
void WorkerAgent::Monitor(Rank* rank) {
  const moe::v1::Assignment& a = rank->assignment;
  auto on_report = [&](const std::string& line) {
    moe::v1::WorkerMessage m = AboutRank(a, /*started=*/false);
    if (StepMetricsFromJson(line, m.mutable_step()->mutable_metrics()).ok())
      SendStep(std::move(*m.mutable_step()));
  };
  rank->log = std::make_unique<RankLogWriter>(
      RankLogPath(o_.runtime_dir, a.job_id(), a.attempt(), a.rank()));
  // The agent's own lines bracket the rank's output, so every rank's log says where and when it ran
  // and how it ended, even a rank that printed nothing (only rank 0 prints its steps).
  rank->log->Append("moe-worker: rank " + std::to_string(a.rank()) + " of " + a.job_id() +
                    " attempt " + std::to_string(a.attempt()) + " started on " + rank->name + " (" +
                    o_.devices[static_cast<size_t>(rank->device)] + ", node " + o_.node + ", pid " +
                    std::to_string(rank->process->pid()) + ")");
  auto on_output = [&](const std::string& line) {
    LogRankLine(a.job_id(), a.rank(), line);
    rank->log->Append(line);
  };
  while (rank->process->Pump(0.2, on_report, on_output)) {
  }
  const RankExit exit = rank->process->Wait();
  const RankEnd end = exit.Outcome();
  rank->proxy->Stop();
  ::unlink(rank->spec_path.c_str());
  const std::string how =
      end.ok() ? " finished"
               : (rank->process->stop_requested() ? " stopped" : " failed: " + end.message);
  rank->log->Append("moe-worker: rank " + std::to_string(a.rank()) + how + " (exit code " +
                    std::to_string(exit.exit_code()) + ")");
  rank->done = true;
  MOE_LOG(INFO) << "rank " << a.rank() << " of " << a.job_id() << " attempt " << a.attempt() << how;
  Report(Finished(a, end, exit.exit_code(), rank->process->stop_requested()));
}

// Fake mode: the rank is a thread of this agent; the controller sees what a rank would send.
void WorkerAgent::CancelRank(const std::string& job_id, int attempt, const std::string& reason,
                             bool now) {
  std::vector<std::shared_ptr<Rank>> of_attempt;
  {
    MutexLock lock(&ranks_mu_);
    for (const auto& [device, rank] : ranks_) {
      if (!rank->done && rank->assignment.job_id() == job_id &&
          rank->assignment.attempt() == attempt)
        of_attempt.push_back(rank);
    }
  }
  for (const auto& cur : of_attempt) {
    // Told already: the controller sends a cancel per rank of the attempt, and this agent may run
    // several of them; only --now says more.
    if (cur->stop_asked && !now) continue;
    MOE_LOG(INFO) << (now ? "killing rank " : "stopping rank ") << cur->assignment.rank() << " of "
                  << job_id << " on " << cur->name << ": " << reason;
    // It stops at its next step boundary; if not within the grace, its monitor kills it.
    if (cur->process) cur->process->RequestStop(now ? 0 : o_.stop_grace_seconds);
    cur->stop_asked = true;
  }
}

}  // namespace moe::worker
