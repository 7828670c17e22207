// What an agent says about its ranks (rank_messages.h).
#include "worker/agent/rank_messages.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/confined_dir.h"
#include "common/log.h"
#include "common/path_roots.h"

namespace moe::worker {

namespace {

moe::v1::FailureClass ToProto(FailureClass c) {
  switch (c) {
    case FailureClass::kNone:
      return moe::v1::FAILURE_NONE;
    case FailureClass::kStopped:
      return moe::v1::FAILURE_STOPPED;
    case FailureClass::kPermanent:
      return moe::v1::FAILURE_PERMANENT;
    case FailureClass::kTransient:
      break;
  }
  return moe::v1::FAILURE_TRANSIENT;
}

}  // namespace

moe::v1::RankFinished Finished(const moe::v1::Assignment& a, const RankEnd& end, int exit_code,
                               bool cancelled) {
  moe::v1::RankFinished f;
  f.set_job_id(a.job_id());
  f.set_attempt(a.attempt());
  f.set_rank(a.rank());
  f.set_ok(end.ok());
  f.set_cancelled(cancelled);
  f.set_exit_code(exit_code);
  f.set_failure_class(ToProto(end.failure_class));
  f.set_status_code(std::string(StatusCodeName(end.code)));
  f.set_checkpoint_step(end.checkpoint_step);
  if (!end.ok()) f.set_message(end.message);
  return f;
}

moe::v1::RankFinished NotRun(const moe::v1::Assignment& a, FailureClass cls, StatusCode code,
                             std::string message) {
  RankEnd end;
  end.failure_class = cls;
  end.code = code;
  end.message = std::move(message);
  return Finished(a, end, cls == FailureClass::kPermanent ? kExitCannotRun : -1, false);
}

moe::v1::WorkerMessage AboutRank(const moe::v1::Assignment& a, bool started) {
  moe::v1::WorkerMessage m;
  if (started) {
    m.mutable_started()->set_job_id(a.job_id());
    m.mutable_started()->set_attempt(a.attempt());
    m.mutable_started()->set_rank(a.rank());
  } else {
    m.mutable_step()->set_job_id(a.job_id());
    m.mutable_step()->set_attempt(a.attempt());
    m.mutable_step()->set_rank(a.rank());
  }
  return m;
}

// The rank opens its paths again beneath the roots (moe-train --data-root, --checkpoint-root), so
// what it reads and writes is what this check saw.
Status CheckAssignmentPaths(const moe::v1::Assignment& a,
                            const std::vector<std::string>& data_roots,
                            const std::vector<std::string>& checkpoint_roots) {
  const moe::v1::JobSpec& spec = a.spec().spec();
  MOE_RETURN_IF_ERROR(CheckPathText("spec.data.path", spec.data().path()));
  MOE_RETURN_IF_ERROR(CheckPathText("spec.checkpoint.dir", spec.checkpoint().dir()));
  if (spec.data().source() != "synthetic") {
    // Where the rank will find it (a relative path: the first root that holds it, as moe-train
    // resolves it); nowhere here, the path as written (a path outside the roots is refused, and the
    // rank fails permanently on a dataset it cannot open, naming it). The spec is not changed.
    std::string path = ResolveDatasetPath(spec.data().path(), data_roots);
    if (path.empty()) path = spec.data().path();
    for (const char* file : {".bin", ".idx"}) {
      MOE_RETURN_IF_ERROR(CheckUnderRoots("spec.data.path", path + file, data_roots, "data", true,
                                          data_roots.front()));
    }
  }
  if (spec.checkpoint().dir().empty()) return OkStatus();
  return CheckUnderRoots("spec.checkpoint.dir", spec.checkpoint().dir(), checkpoint_roots,
                         "checkpoint", true, checkpoint_roots.front());
}

std::string UnusableRoot(const std::string& root) {
  if (Status st = CheckPathText("checkpoint root", root); !st.ok()) return st.message();
  if (root.empty() || root[0] != '/') return "not an absolute path";
  if (root == "/") return "/ would let a job write anywhere (only an explicit --checkpoint-root /)";
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) return std::string("not here: ") + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (::access(root.c_str(), W_OK | X_OK) != 0) return "not writable by this worker";
  return "";
}

moe::v1::WorkerMessage RootMounted(const std::string& root, const std::string& why) {
  moe::v1::WorkerMessage m;
  auto* r = m.mutable_checkpoint_root_mounted();
  r->set_root(root);
  r->set_ok(why.empty());
  r->set_why(why);
  return m;
}

bool AcceptControllerEpoch(std::atomic<int64_t>* max, int64_t epoch, const std::string& what) {
  int64_t seen = max->load();
  while (epoch > seen && !max->compare_exchange_weak(seen, epoch)) {
  }
  if (epoch >= seen) return true;
  MOE_LOG(ERROR) << "refusing " << what << " from a controller of epoch " << epoch << ": epoch "
                 << seen
                 << " was seen already (a newer controller holds the state; this one is stale)";
  return false;
}

double RetryHintSeconds(const std::string& message) {
  const size_t at = message.find("retry after ");
  if (at == std::string::npos) return 0;
  const double ms = std::atof(message.c_str() + at + 12);
  return ms > 0 && ms < 600000 ? ms / 1000.0 : 0;
}

}  // namespace moe::worker
