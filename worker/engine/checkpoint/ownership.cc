#include "worker/engine/checkpoint/ownership.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common/file_util.h"
#include "common/yaml.h"

namespace moe::checkpoint {
namespace {

inline constexpr char kOwnerLock[] = ".moe-owner.lock";

// The directory's owner lock, held while it lives (fcntl F_SETLKW: waits for the holder; released
// when the descriptor closes).
class OwnerLock {
 public:
  static StatusOr<std::unique_ptr<OwnerLock>> Take(const std::string& dir) {
    const std::string path = JoinPath(dir, kOwnerLock);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return UnavailableError(path + ": " + std::strerror(errno));
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    while (::fcntl(fd, F_SETLKW, &fl) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return UnavailableError("lock " + path + ": " + std::strerror(err));
    }
    return std::unique_ptr<OwnerLock>(new OwnerLock(fd));
  }
  ~OwnerLock() { ::close(fd_); }
  OwnerLock(const OwnerLock&) = delete;
  OwnerLock& operator=(const OwnerLock&) = delete;

 private:
  explicit OwnerLock(int fd) : fd_(fd) {}
  int fd_;
};

std::string Describe(const OwnerClaim& c) {
  return "job " + c.job + " (" + c.name + (c.owner.empty() ? "" : ", submitted by " + c.owner) +
         ") attempt " + std::to_string(c.attempt) + " of controller epoch " +
         std::to_string(c.epoch);
}

std::string MarkerJson(const OwnerClaim& c) {
  Node n = Node::Map();
  n.Set("job", Node::Scalar(c.job, true));
  n.Set("name", Node::Scalar(c.name, true));
  n.Set("owner", Node::Scalar(c.owner, true));
  n.Set("epoch", Node::Scalar(std::to_string(c.epoch)));
  n.Set("attempt", Node::Scalar(std::to_string(c.attempt)));
  return ToJson(n, 2) + "\n";
}

}  // namespace

StatusOr<OwnerClaim> CheckpointOwnership::Read(const std::string& dir) {
  const std::string path = JoinPath(dir, kOwnerMarker);
  if (!PathExists(path)) return NotFoundError(path + ": no owner marker");
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(text, {size_t{1} << 16, 4, "an owner marker"}));
  OwnerClaim c;
  const auto str = [&](const char* key, std::string* out) -> Status {
    const Node* v = doc.Find(key);
    if (v == nullptr) return DataLossError(path + ": no '" + key + "'");
    MOE_ASSIGN_OR_RETURN(*out, v->AsString(key));
    return OkStatus();
  };
  const auto num = [&](const char* key, int64_t* out) -> Status {
    const Node* v = doc.Find(key);
    if (v == nullptr) return DataLossError(path + ": no '" + key + "'");
    MOE_ASSIGN_OR_RETURN(*out, v->AsInt(key));
    return OkStatus();
  };
  MOE_RETURN_IF_ERROR(str("job", &c.job));
  MOE_RETURN_IF_ERROR(str("name", &c.name));
  MOE_RETURN_IF_ERROR(str("owner", &c.owner));
  MOE_RETURN_IF_ERROR(num("epoch", &c.epoch));
  MOE_RETURN_IF_ERROR(num("attempt", &c.attempt));
  return c;
}

StatusOr<CheckpointOwnership> CheckpointOwnership::Claim(const std::string& dir,
                                                         const std::string& shown,
                                                         const OwnerClaim& me) {
  MOE_ASSIGN_OR_RETURN(const std::unique_ptr<OwnerLock> lock, OwnerLock::Take(dir));
  auto held = Read(dir);
  if (!held.ok() && held.status().code() != StatusCode::kNotFound) return held.status();
  if (held.ok()) {
    const OwnerClaim& h = *held;
    const bool same_job = h.job == me.job, resubmitted = h.name == me.name && h.owner == me.owner;
    if (!same_job && !resubmitted) {
      return FailedPreconditionError("spec.checkpoint.dir: " + shown + " belongs to " +
                                     Describe(h) +
                                     "; a checkpoint directory serves one job for its whole life");
    }
    if (same_job && me.OlderThan(h)) {
      return AbortedError(Describe(me) + " is stale: " + shown + " is held by its newer " +
                          Describe(h));
    }
  }
  MOE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, kOwnerMarker), MarkerJson(me)));
  return CheckpointOwnership(dir, shown, me);
}

Status CheckpointOwnership::WhileHeld(const std::function<Status()>& fn) const {
  MOE_ASSIGN_OR_RETURN(const std::unique_ptr<OwnerLock> lock, OwnerLock::Take(dir_));
  MOE_RETURN_IF_ERROR(Check());
  return fn();
}

Status CheckpointOwnership::Check() const {
  auto held = Read(dir_);
  if (!held.ok()) {  // storage trouble (the directory gone for a while), not another owner
    return UnavailableError("the owner marker of " + shown_ +
                            " cannot be read: " + held.status().message());
  }
  const OwnerClaim& h = *held;
  if (h.job == me_.job && h.epoch == me_.epoch && h.attempt == me_.attempt) return OkStatus();
  return AbortedError("fenced: " + shown_ + " is now held by " + Describe(h) +
                      ", not by this rank's " + Describe(me_) +
                      "; it commits, prunes and records nothing more");
}

}  // namespace moe::checkpoint
