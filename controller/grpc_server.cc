#include "controller/grpc_server.h"

#include <dlfcn.h>
#include <grpcpp/health_check_service_interface.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/mutex.h"
#include "controller/executor.h"
#include "controller/udp_heartbeats.h"
#include "moe/v1/job_service.grpc.pb.h"
#include "moe/v1/worker_service.grpc.pb.h"

namespace moe::controller {

grpc::Status ToGrpc(const Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), st.message());
}

namespace {

std::string Metadata(grpc::CallbackServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}
std::string Authorization(grpc::CallbackServerContext* ctx) {
  return Metadata(ctx, "authorization");
}

// A unary call that finishes right away.
template <typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const TokenAuth& auth, Role role,
                                RpcTimer timer, Fn&& fn) {
  auto* reactor = ctx->DefaultReactor();
  Status st = auth.Check(Authorization(ctx), role);
  if (st.ok()) st = fn();
  reactor->Finish(ToGrpc(st));
  timer.Done();
  return reactor;
}

// A unary call that may wait for the store: run on the executor, finished from there.
template <typename Fn>
grpc::ServerUnaryReactor* UnaryLater(grpc::CallbackServerContext* ctx, const TokenAuth& auth,
                                     Role role, Executor& ex, RpcTimer timer, Fn fn) {
  auto* reactor = ctx->DefaultReactor();
  if (Status st = auth.Check(Authorization(ctx), role); !st.ok()) {
    reactor->Finish(ToGrpc(st));
    timer.Done();
    return reactor;
  }
  ex.Post([reactor, timer, fn = std::move(fn)]() mutable {
    reactor->Finish(ToGrpc(fn()));
    timer.Done();
  });
  return reactor;
}

// An mTLS client certificate's names: its subjectAltName DNS names and its common name (none
// without a client certificate).
std::vector<std::string> CertNames(grpc::CallbackServerContext* ctx) {
  std::vector<std::string> out;
  const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return out;
  for (const char* key : {"x509_subject_alternative_name", "x509_common_name"})
    for (const grpc::string_ref& v : auth->FindPropertyValues(key))
      out.emplace_back(v.data(), v.size());
  return out;
}

// Who calls the WorkerService (node_credentials.h). Where the controller has tokens, a node
// credential is needed for everything but Bootstrap, and a token of the worker role for Bootstrap
// alone.
StatusOr<WorkerIdentity> IdentifyWorker(grpc::CallbackServerContext* ctx, const TokenAuth& auth,
                                        const NodeCredentials& credentials, bool bootstrap) {
  WorkerIdentity id;
  id.cert_names = CertNames(ctx);
  if (!auth.enabled()) return id;
  const std::string authorization = Authorization(ctx);
  const std::string prefix = "Bearer ";
  if (authorization.rfind(prefix, 0) == 0) {
    if (auto c = credentials.Find(std::string_view(authorization).substr(prefix.size()))) {
      if (c->revoked_at() != 0) {
        return PermissionDeniedError(
            "revoked: the credential of node " + c->node() + " was revoked" +
            (c->revoked_by().empty() ? "" : " by " + c->revoked_by()) +
            " (moectl delete node); this agent stops. Remove its credential file (moe-worker "
            "--node-credential) to bootstrap the node again");
      }
      if (bootstrap)
        return FailedPreconditionError("bootstrap: this is node " + c->node() + "'s credential");
      id.node = c->node();
      id.rack = c->rack();
      return id;
    }
  }
  MOE_RETURN_IF_ERROR(auth.Check(authorization, Role::kWorker));
  if (!bootstrap) {
    return PermissionDeniedError(
        "a worker token only bootstraps: exchange it for a node credential first "
        "(WorkerService.Bootstrap; moe-worker does so itself and keeps it, "
        "--node-credential)");
  }
  return id;
}

// One page of the workers (by name) after the request's token.
Status WorkersPage(Controller& c, const moe::v1::ListWorkersRequest& req,
                   moe::v1::ListWorkersResponse* resp) {
  constexpr int kDefault = 1000, kMax = 10000;
  constexpr size_t kMaxPageBytes = 8 << 20;
  if (req.page_size() < 0 || req.page_size() > kMax) {
    return InvalidArgumentError("page_size: 0 (the default, " + std::to_string(kDefault) + ") to " +
                                std::to_string(kMax));
  }
  const size_t limit = static_cast<size_t>(req.page_size() == 0 ? kDefault : req.page_size());
  c.WorkersPage(req.page_token(), limit, kMaxPageBytes, resp);
  return OkStatus();
}

bool IsTerminalJob(const moe::v1::WatchJobResponse& r) {
  return r.has_job() && IsTerminal(r.job().state());
}

// WatchJob: events and metrics pushed by the controller, written one at a time.
//
// Threads: Push runs on whichever thread changed the job (under the Controller's mutex: it only
// queues); gRPC's callback threads run OnWriteDone, OnCancel and OnDone. mu_ guards the queue and
// the stream's state between them.
class WatchReactor final : public grpc::ServerWriteReactor<moe::v1::WatchJobResponse> {
 public:
  WatchReactor(Controller& controller, const std::string& id, int64_t after_seq)
      : controller_(controller) {
    auto sub = controller_.Watch(
        id, [this](const moe::v1::WatchJobResponse& r) { Push(r); }, after_seq);
    MutexLock lock(&mu_);
    if (!sub.ok()) {
      FinishLocked(ToGrpc(sub.status()));
      return;
    }
    sub_ = *sub;
    MaybeWriteLocked();
  }
  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!queue_.empty()) queue_.pop_front();
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away"));
      return;
    }
    MaybeWriteLocked();
  }
  void OnCancel() override {
    MutexLock lock(&mu_);
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    int64_t sub;
    {
      MutexLock lock(&mu_);
      sub = sub_;
    }
    controller_.Unwatch(
        sub);  // after it returns no Push can come: they run under the Controller's mutex
    delete this;
  }

 private:
  void Push(const moe::v1::WatchJobResponse& r) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (finished_) return;
    // A slow watcher loses old metrics, never events or the final snapshot.
    if (r.has_metrics() && queue_.size() > 256) return;
    queue_.push_back(r);
    if (IsTerminalJob(r)) done_ = true;  // the stream ends after this last snapshot
    MaybeWriteLocked();
  }
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return;
    if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
    } else if (done_) {
      FinishLocked(grpc::Status::OK);
    }
  }
  void FinishLocked(const grpc::Status& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(st);
  }

  Controller& controller_;
  Mutex mu_;
  std::deque<moe::v1::WatchJobResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int64_t sub_ ABSL_GUARDED_BY(mu_) = 0;
};

// Connect: one stream per node agent (however many devices it serves).
//
// Threads: gRPC's callback threads run OnReadDone (one at a time: reads follow each other),
// OnWriteDone and OnDone; Send comes from whichever thread the Controller runs on (under its mutex:
// it only queues). mu_ guards the write queue and the stream's state; in_ and name_ belong to the
// read path. No call into the Controller holds mu_, since the Controller may Send from inside it.
class WorkerStream final
    : public grpc::ServerBidiReactor<moe::v1::WorkerMessage, moe::v1::ControllerMessage>,
      public WorkerChannel {
 public:
  WorkerStream(Controller& controller, Executor& ex, UdpHeartbeats* udp,
               StatusOr<WorkerIdentity> id)
      : controller_(controller), ex_(ex), udp_(udp) {
    if (!id.ok()) {
      MutexLock lock(&mu_);
      reads_done_ = true;
      MaybeFinishLocked(ToGrpc(id.status()));
      return;
    }
    id_ = std::move(*id);
    StartRead(&in_);
  }
  void Close(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_) override {
    MutexLock lock(&mu_);
    closed_ = true;
    reads_done_ = true;  // the read in flight ends when the stream finishes
    MaybeFinishLocked(grpc::Status(grpc::StatusCode::ABORTED, why));
  }
  void Send(const moe::v1::ControllerMessage& msg) ABSL_LOCKS_EXCLUDED(mu_) override {
    MutexLock lock(&mu_);
    if (finished_) return;
    // Registered goes first: Controller::Register may place a rank on the agent (a waiting job)
    // before its answer is sent, and an agent that started that rank without its session had the
    // rank's rendezvous refused (a restart spent; tests/deploy/slurm_test.sh under TLS, 3 runs of
    // 5).
    if (!registered_sent_ && !msg.has_registered()) {
      held_.push_back(msg);
      return;
    }
    queue_.push_back(msg);
    if (msg.has_registered()) {
      registered_sent_ = true;
      for (auto& h : held_) queue_.push_back(std::move(h));
      held_.clear();
    }
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok || Closed()) {
      if (!name_.empty()) controller_.Disconnected(name_, this);
      EndReads(grpc::Status::OK);
      return;
    }
    // The lease renewed, nothing else: no lock taken. A beat that renews nothing (the agent was
    // declared lost while its stream stayed up) goes the slow way: it is told to register again.
    if (!name_.empty() && in_.has_heartbeat() &&
        controller_.leases().Renew(name_, static_cast<WorkerChannel*>(this))) {
      udp_->NoteStreamBeat();
      StartRead(&in_);
      return;
    }
    if (name_.empty()) {
      StatusOr<double> admitted = controller_.registrations().Begin();
      if (!admitted.ok()) {
        EndReads(ToGrpc(admitted.status()));  // a herd: come back in the slot named, not queued
        return;
      }
      admitted_ = *admitted;
    }
    ex_.Post([this] { Handle(); });  // may wait for the store: not on gRPC's thread
  }
  // The stream's message in in_ (the next read starts after it: the worker's messages stay in
  // order).
  void Handle() ABSL_LOCKS_EXCLUDED(mu_) {
    Status st;
    if (name_.empty()) {
      st = RegisterWorker();
      controller_.registrations().End(admitted_);
    } else {
      st = controller_.OnWorkerMessage(name_, in_);
    }
    if (!st.ok()) {
      // A refused message ends the stream; the worker's name stays held by its session.
      if (!name_.empty()) controller_.Disconnected(name_, this);
      EndReads(ToGrpc(st));
      return;
    }
    StartRead(&in_);
  }
  void OnWriteDone(bool ok) override {
    bool answered = false;
    {
      MutexLock lock(&mu_);
      writing_ = false;
      if (!queue_.empty()) {
        answered = ok && queue_.front().has_registered();
        queue_.pop_front();
      }
      if (ok && !queue_.empty() && !finished_) {
        writing_ = true;
        StartWrite(&queue_.front());
      } else {
        MaybeFinishLocked(grpc::Status::OK);
      }
    }
    // The lease runs from when the agent's answer left, not from when its registration applied:
    // in a herd the answer may wait behind others' writes, and the agent cannot beat before it.
    if (answered) controller_.leases().Answered(name_, static_cast<WorkerChannel*>(this));
  }
  void OnDone() override { delete this; }

 private:
  // The stream's first message.
  Status RegisterWorker() ABSL_LOCKS_EXCLUDED(mu_) {
    if (!in_.has_register_()) return InvalidArgumentError("the first message must be register");
    MOE_ASSIGN_OR_RETURN(moe::v1::Registered registered,
                         controller_.Register(in_.register_(), this, id_));
    name_ = in_.register_().name();
    udp_->Grant(name_, static_cast<WorkerChannel*>(this), &registered);  // the lease's id and key
    moe::v1::ControllerMessage m;
    *m.mutable_registered() = std::move(registered);
    Send(m);
    return OkStatus();
  }
  bool Closed() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return closed_;
  }
  void EndReads(const grpc::Status& st) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    reads_done_ = true;
    MaybeFinishLocked(st);
  }
  // Finishes once reads are over and the last write went out, with the first error seen.
  void MaybeFinishLocked(const grpc::Status& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!reads_done_ || writing_ || finished_) {
      if (!st.ok()) pending_status_ = st;
      return;
    }
    finished_ = true;
    Finish(st.ok() ? pending_status_ : st);
  }

  Controller& controller_;
  Executor& ex_;
  UdpHeartbeats* const udp_;  // grants nothing when it does not serve: stream heartbeats only
  WorkerIdentity id_;         // who opened the stream
  moe::v1::WorkerMessage in_;
  std::string name_;     // the agent's, set once registered
  double admitted_ = 0;  // when the registration gate let its registration in
  Mutex mu_;
  std::deque<moe::v1::ControllerMessage> queue_ ABSL_GUARDED_BY(mu_);
  // Sent before Registered (an assignment from the registration's own scheduling pass): held until
  // it goes, then queued behind it.
  std::deque<moe::v1::ControllerMessage> held_ ABSL_GUARDED_BY(mu_);
  bool registered_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // Close: a newer stream replaced this one
  grpc::Status pending_status_ ABSL_GUARDED_BY(mu_) = grpc::Status::OK;
};

}  // namespace

class GrpcServer::JobServiceImpl final : public moe::v1::JobService::CallbackService {
 public:
  JobServiceImpl(Controller& c, const TokenAuth& a, Executor& ex, const RpcTimes& times)
      : c_(c), auth_(a), ex_(ex), times_(times) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const moe::v1::SubmitJobRequest* req,
                                      moe::v1::Job* resp) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(ctx, auth_, Role::kAdmin, ex_, times_.Start("SubmitJob"),
                      [=, this]() -> Status {
                        MOE_ASSIGN_OR_RETURN(*resp, c_.Submit(req->job(), req->request_id(), who));
                        return OkStatus();
                      });
  }
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const moe::v1::GetJobRequest* req, moe::v1::Job* resp) override {
    return Unary(ctx, auth_, Role::kViewer, times_.Start("GetJob"), [&]() -> Status {
      MOE_ASSIGN_OR_RETURN(*resp, c_.Get(req->id(), /*with_events=*/true));
      return OkStatus();
    });
  }
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const moe::v1::ListJobsRequest* req,
                                     moe::v1::ListJobsResponse* resp) override {
    return Unary(ctx, auth_, Role::kViewer, times_.Start("ListJobs"), [&]() -> Status {
      MOE_ASSIGN_OR_RETURN(*resp, c_.ListPage(*req));
      return OkStatus();
    });
  }
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const moe::v1::CancelJobRequest* req,
                                      moe::v1::Job* resp) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(ctx, auth_, Role::kAdmin, ex_, times_.Start("CancelJob"),
                      [=, this]() -> Status {
                        MOE_ASSIGN_OR_RETURN(*resp, c_.Cancel(req->id(), who, req->now()));
                        return OkStatus();
                      });
  }
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const moe::v1::DeleteJobRequest* req,
                                      moe::v1::DeleteJobResponse*) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(ctx, auth_, Role::kAdmin, ex_, times_.Start("DeleteJob"),
                      [=, this]() -> Status { return c_.Delete(req->id(), who); });
  }
  grpc::ServerWriteReactor<moe::v1::WatchJobResponse>* WatchJob(
      grpc::CallbackServerContext* ctx, const moe::v1::WatchJobRequest* req) override {
    Status st = auth_.Check(Authorization(ctx), Role::kViewer);
    if (!st.ok()) {
      class Refused final : public grpc::ServerWriteReactor<moe::v1::WatchJobResponse> {
       public:
        explicit Refused(const Status& s) { Finish(ToGrpc(s)); }
        void OnDone() override { delete this; }
      };
      return new Refused(st);
    }
    return new WatchReactor(c_, req->id(), req->after_seq());
  }
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* ctx,
                                        const moe::v1::ListWorkersRequest* req,
                                        moe::v1::ListWorkersResponse* resp) override {
    return Unary(ctx, auth_, Role::kViewer, times_.Start("ListWorkers"),
                 [&]() -> Status { return WorkersPage(c_, *req, resp); });
  }
  grpc::ServerUnaryReactor* ListQueues(grpc::CallbackServerContext* ctx,
                                       const moe::v1::ListQueuesRequest*,
                                       moe::v1::ListQueuesResponse* resp) override {
    return Unary(ctx, auth_, Role::kViewer, times_.Start("ListQueues"), [&]() -> Status {
      for (auto& q : c_.Queues()) *resp->add_queues() = std::move(q);
      return OkStatus();
    });
  }
  grpc::ServerUnaryReactor* StepDown(grpc::CallbackServerContext* ctx,
                                     const moe::v1::StepDownRequest*,
                                     moe::v1::StepDownResponse* resp) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(ctx, auth_, Role::kAdmin, ex_, times_.Start("StepDown"),
                      [=, this]() -> Status {
                        MOE_RETURN_IF_ERROR(c_.StepDown(who));
                        const grpc::string_ref authority = ctx->ExperimentalGetAuthority();
                        resp->set_controller(std::string(authority.data(), authority.size()));
                        return OkStatus();
                      });
  }
  grpc::ServerUnaryReactor* ListRacks(grpc::CallbackServerContext* ctx,
                                      const moe::v1::ListRacksRequest*,
                                      moe::v1::ListRacksResponse* resp) override {
    return Unary(ctx, auth_, Role::kViewer, times_.Start("ListRacks"), [&]() -> Status {
      *resp = c_.Racks();
      return OkStatus();
    });
  }
  grpc::ServerUnaryReactor* DrainWorker(grpc::CallbackServerContext* ctx,
                                        const moe::v1::DrainWorkerRequest* req,
                                        moe::v1::Worker* resp) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(
        ctx, auth_, Role::kAdmin, ex_, times_.Start("DrainWorker"), [=, this]() -> Status {
          MOE_ASSIGN_OR_RETURN(*resp, c_.SetDrained(req->name(), true, who, req->move_work()));
          return OkStatus();
        });
  }
  grpc::ServerUnaryReactor* UndrainWorker(grpc::CallbackServerContext* ctx,
                                          const moe::v1::DrainWorkerRequest* req,
                                          moe::v1::Worker* resp) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(ctx, auth_, Role::kAdmin, ex_, times_.Start("UndrainWorker"),
                      [=, this]() -> Status {
                        MOE_ASSIGN_OR_RETURN(*resp, c_.SetDrained(req->name(), false, who));
                        return OkStatus();
                      });
  }
  // Answered when the worker's LogReply arrives (or fails): the reactor finishes from that thread.
  grpc::ServerUnaryReactor* GetLogs(grpc::CallbackServerContext* ctx,
                                    const moe::v1::GetLogsRequest* req,
                                    moe::v1::GetLogsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    RpcTimer timer = times_.Start("GetLogs");
    if (Status st = auth_.Check(Authorization(ctx), Role::kViewer); !st.ok()) {
      reactor->Finish(ToGrpc(st));
      timer.Done();
      return reactor;
    }
    c_.RequestLogs(*req, [reactor, resp, timer](StatusOr<moe::v1::GetLogsResponse> r) mutable {
      if (r.ok()) *resp = std::move(*r);
      reactor->Finish(ToGrpc(r.ok() ? OkStatus() : r.status()));
      timer.Done();
    });
    return reactor;
  }
  grpc::ServerUnaryReactor* DeleteWorker(grpc::CallbackServerContext* ctx,
                                         const moe::v1::DrainWorkerRequest* req,
                                         moe::v1::DeleteWorkerResponse*) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(ctx, auth_, Role::kAdmin, ex_, times_.Start("DeleteWorker"),
                      [=, this]() -> Status { return c_.DeleteWorker(req->name(), who); });
  }
  grpc::ServerUnaryReactor* DeleteNode(grpc::CallbackServerContext* ctx,
                                       const moe::v1::DeleteNodeRequest* req,
                                       moe::v1::DeleteWorkersResponse* resp) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(ctx, auth_, Role::kAdmin, ex_, times_.Start("DeleteNode"),
                      [=, this]() -> Status {
                        MOE_ASSIGN_OR_RETURN(*resp, c_.DeleteNode(req->node(), who));
                        return OkStatus();
                      });
  }
  grpc::ServerUnaryReactor* DeleteWorkers(grpc::CallbackServerContext* ctx,
                                          const moe::v1::DeleteWorkersRequest* req,
                                          moe::v1::DeleteWorkersResponse* resp) override {
    const std::string who = auth_.Who(Authorization(ctx));
    return UnaryLater(ctx, auth_, Role::kAdmin, ex_, times_.Start("DeleteWorkers"),
                      [=, this]() -> Status {
                        MOE_ASSIGN_OR_RETURN(*resp, c_.DeleteWorkers(req->state(), who));
                        return OkStatus();
                      });
  }

 private:
  Controller& c_;
  const TokenAuth& auth_;
  Executor& ex_;
  const RpcTimes& times_;
};

class GrpcServer::WorkerServiceImpl final : public moe::v1::WorkerService::CallbackService {
 public:
  WorkerServiceImpl(Controller& c, const TokenAuth& a, Clock& clock, Executor& ex,
                    UdpHeartbeats* udp, const RpcTimes& times)
      : c_(c), auth_(a), clock_(clock), ex_(ex), udp_(udp), times_(times) {}

  grpc::ServerBidiReactor<moe::v1::WorkerMessage, moe::v1::ControllerMessage>* Connect(
      grpc::CallbackServerContext* ctx) override {
    return new WorkerStream(c_, ex_, udp_,
                            IdentifyWorker(ctx, auth_, c_.node_credentials(), false));
  }
  grpc::ServerUnaryReactor* Bootstrap(grpc::CallbackServerContext* ctx,
                                      const moe::v1::BootstrapRequest* req,
                                      moe::v1::BootstrapResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    RpcTimer timer = times_.Start("Bootstrap");
    if (!auth_.enabled()) {
      reactor->Finish(ToGrpc(FailedPreconditionError(
          "bootstrap: this controller has no tokens (--tokens): workers register without a node "
          "credential")));
      timer.Done();
      return reactor;
    }
    if (Status st = IdentifyWorker(ctx, auth_, c_.node_credentials(), true).status(); !st.ok()) {
      reactor->Finish(ToGrpc(st));
      timer.Done();
      return reactor;
    }
    const std::string who = auth_.Who(Authorization(ctx));
    ex_.Post([this, reactor, req, resp, timer, who]() mutable {
      StatusOr<moe::v1::BootstrapResponse> r = c_.Bootstrap(*req, who);
      if (r.ok()) *resp = std::move(*r);
      reactor->Finish(ToGrpc(r.status()));
      timer.Done();
    });
    return reactor;
  }
  grpc::ServerUnaryReactor* RendezvousSet(grpc::CallbackServerContext* ctx,
                                          const moe::v1::RendezvousSetRequest* req,
                                          moe::v1::RendezvousSetResponse*) override {
    return Unary(ctx, auth_, Role::kNone, times_.Start("RendezvousSet"), [&]() -> Status {
      MOE_RETURN_IF_ERROR(CheckKey(ctx, req->key()));
      if (req->value().size() > kMaxRendezvousValueBytes) {
        return InvalidArgumentError("rendezvous value over " +
                                    std::to_string(kMaxRendezvousValueBytes) + " bytes");
      }
      return c_.rendezvous().Set(req->key(), req->value());
    });
  }
  grpc::ServerUnaryReactor* RendezvousGet(grpc::CallbackServerContext* ctx,
                                          const moe::v1::RendezvousGetRequest* req,
                                          moe::v1::RendezvousGetResponse* resp) override {
    return Unary(ctx, auth_, Role::kNone, times_.Start("RendezvousGet"), [&]() -> Status {
      MOE_RETURN_IF_ERROR(CheckKey(ctx, req->key()));
      auto v = c_.rendezvous().Get(req->key());
      if (!v) return NotFoundError("key " + req->key());
      resp->set_value(*v);
      return OkStatus();
    });
  }
  grpc::ServerUnaryReactor* RendezvousWait(grpc::CallbackServerContext* ctx,
                                           const moe::v1::RendezvousWaitRequest* req,
                                           moe::v1::RendezvousWaitResponse*) override {
    auto* reactor = ctx->DefaultReactor();
    Status st;  // who calls: CheckKey (a node credential where there are tokens)
    if (req->keys_size() == 0 || req->keys_size() > 4096)
      st = InvalidArgumentError("keys: 1 to 4096 keys");
    for (const auto& k : req->keys())
      if (st.ok()) st = CheckKey(ctx, k);
    if (st.ok() && !(req->timeout_seconds() > 0 && req->timeout_seconds() <= 3600)) {
      st = InvalidArgumentError("timeout_seconds must be in (0, 3600]");
    }
    if (!st.ok()) {
      reactor->Finish(ToGrpc(st));
      return reactor;
    }
    const double deadline = clock_.Monotonic() + req->timeout_seconds();
    c_.rendezvous().Wait(std::vector<std::string>(req->keys().begin(), req->keys().end()), deadline,
                         [reactor](Status s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }

 private:
  // Only keys of the caller's own running attempts: the session names the agent, its devices their
  // ranks.
  Status CheckKey(grpc::CallbackServerContext* ctx, const std::string& key) {
    if (key.size() > kMaxRendezvousKeyBytes)
      return InvalidArgumentError("rendezvous key over 512 bytes");
    MOE_ASSIGN_OR_RETURN(const WorkerIdentity id,
                         IdentifyWorker(ctx, auth_, c_.node_credentials(), false));
    MOE_RETURN_IF_ERROR(c_.CheckSessionNode(Metadata(ctx, "x-moe-session"), id.node));
    MOE_ASSIGN_OR_RETURN(const std::vector<std::string> prefixes,
                         c_.RendezvousScope(Metadata(ctx, "x-moe-session")));
    for (const std::string& prefix : prefixes) {
      if (key.rfind(prefix, 0) == 0) return OkStatus();
    }
    return PermissionDeniedError("rendezvous key '" + key.substr(0, 128) +
                                 "' is not under an attempt this worker runs (" + prefixes.front() +
                                 (prefixes.size() > 1 ? ", ..." : "") + ")");
  }
  Controller& c_;
  const TokenAuth& auth_;
  Clock& clock_;
  Executor& ex_;
  UdpHeartbeats* const udp_;
  const RpcTimes& times_;
};

namespace {

// Whether this process could bind `listen` ("host:port") itself: tells a port in use (or an address
// not of this machine) from a listener gRPC refused for another reason.
bool CanBind(const std::string& listen) {
  std::string host = listen, port;
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  host = listen.substr(0, colon);
  port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res) != 0)
    return false;
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    ok = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return ok;
}

}  // namespace

Status GrpcServer::ListenError(const ServerOptions& o) {
  if (!CanBind(o.listen)) {
    return UnavailableError(
        "cannot listen on " + o.listen +
        ": the port is in use (another controller?) or the address is not this machine's");
  }
  if (!o.tls_cert.empty()) {
    return InvalidArgumentError("cannot serve TLS on " + o.listen +
                                ": gRPC refused the certificate and key (is " + o.tls_key +
                                " the private key of " + o.tls_cert + ", both PEM?)");
  }
  return UnavailableError("cannot listen on " + o.listen);
}

// gRPC's reflection plugin registers itself when its library loads (a static initialiser; it is not
// linked for that reason: controller/CMakeLists.txt). Process-wide once loaded.
void LoadReflection() {
#ifdef MOE_GRPC_REFLECTION_SONAME
  if (::dlopen(MOE_GRPC_REFLECTION_SONAME, RTLD_NOW | RTLD_GLOBAL) != nullptr) return;
  MOE_LOG(WARNING) << "gRPC reflection is not served: " << ::dlerror();
#else
  MOE_LOG(WARNING) << "gRPC reflection is not served: this build found no libgrpc++_reflection";
#endif
}

GrpcServer::GrpcServer(Controller& controller, const TokenAuth& auth, Clock& clock)
    : controller_(controller),
      auth_(auth),
      clock_(clock),
      udp_(std::make_unique<UdpHeartbeats>(controller.leases())) {}

void GrpcServer::Count(prometheus::Registry& registry) {
  udp_->Count(registry);
  times_.Count(registry);
}
GrpcServer::~GrpcServer() { Shutdown(); }

StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(const ServerOptions& o) {
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    if (o.tls_cert.empty() || o.tls_key.empty())
      return InvalidArgumentError("--tls-cert and --tls-key go together");
    MOE_ASSIGN_OR_RETURN(std::string cert, ReadFileToString(o.tls_cert));
    MOE_ASSIGN_OR_RETURN(std::string key, ReadFileToString(o.tls_key));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    if (!o.tls_client_ca.empty()) {
      MOE_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFileToString(o.tls_client_ca));
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  } else if (!o.tls_client_ca.empty()) {
    return InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  return creds;
}

Status GrpcServer::Start(const ServerOptions& o) {
  grpc::EnableDefaultHealthCheckService(true);
  // Reflection answers without a token, so a controller with --tokens serves it only when told to
  // (--grpc-reflection). Before the builder: it takes the plugins registered when it is made.
  if (o.reflection) LoadReflection();
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, ServerCredentialsFor(o));
  jobs_ = std::make_unique<JobServiceImpl>(controller_, auth_, client_executor_, times_);
  workers_ = std::make_unique<WorkerServiceImpl>(controller_, auth_, clock_, executor_, udp_.get(),
                                                 times_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, creds, &port_);
  builder.RegisterService(jobs_.get());
  builder.RegisterService(workers_.get());
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  // One controller per port: without this gRPC sets SO_REUSEPORT and a second controller would
  // share the port, answering clients with its own view.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxSendMessageSize(o.max_message_bytes);
  // Workers' streams are long-lived; keepalive pings find dead peers that never closed their
  // sockets. Once a minute: a dead node's workers are lost by their lease (seconds) already, this
  // only frees its connection; every 10 s cost 1,638 pings a second at 16,384 node agents.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) return ListenError(o);
  if (o.heartbeat_udp) StartUdpHeartbeats(o.listen);
  return OkStatus();
}

// UDP heartbeats on the gRPC listener's host and port; where that cannot be (a Unix socket, a port
// another program holds for UDP) the agents heartbeat on their streams, as they do when their
// datagrams go unanswered.
void GrpcServer::StartUdpHeartbeats(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  Status st = listen.rfind("unix:", 0) == 0 || colon == std::string::npos
                  ? UnavailableError("not a host:port address")
                  : OkStatus();
  if (st.ok()) {
    std::string host = listen.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    st = udp_->Start(host, port_);
  }
  if (st.ok()) {
    MOE_LOG(INFO) << "heartbeats by UDP on port " << port_ << " (the agents fall back to their "
                  << "streams when their datagrams go unanswered)";
    return;
  }
  MOE_LOG(WARNING) << "no UDP heartbeats (" << st.message() << " for --listen " << listen
                   << "): the agents heartbeat on their streams";  // udp_ grants nothing
}

void GrpcServer::Shutdown() {
  udp_->Stop();  // the lease book outlives the server: no renewal after this
  if (server_) {
    // gRPC's own deadline type (a wall-clock time point): in-flight calls get 2 s to finish.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
  }
}

}  // namespace moe::controller
