#include "worker/agent/node_credential.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "common/log.h"

namespace moe::worker {

namespace {

// Written to a temporary file created 0600, synced, then renamed over `path`: never readable by
// others, never half there.
Status SaveSecret(const std::string& path, const std::string& secret) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return UnavailableError("--node-credential: cannot create " + tmp + ": " +
                            std::strerror(errno));
  const std::string line = secret + "\n";
  const bool ok = ::fchmod(fd, 0600) == 0 &&
                  ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return UnavailableError("--node-credential: cannot write " + path + ": " +
                            std::strerror(ok ? errno : err));
  }
  return OkStatus();
}

}  // namespace

NodeCredential::NodeCredential(const ClientOptions& client, std::string path, std::string node,
                               std::string rack)
    : client_(client), path_(std::move(path)), node_(std::move(node)), rack_(std::move(rack)) {}

Status NodeCredential::Ensure(moe::v1::WorkerService::Stub& stub, std::string* token) {
  *token = client_.token;
  if (client_.token.empty() || plain_) return OkStatus();
  if (credential_.empty() && ::access(path_.c_str(), F_OK) == 0) {
    MOE_ASSIGN_OR_RETURN(credential_, ReadTokenFile(path_));  // its mode checked: 0600
    MOE_LOG(INFO) << "node credential of " << node_ << " read from " << path_;
  }
  if (credential_.empty()) MOE_RETURN_IF_ERROR(Bootstrap(stub));
  if (!plain_) *token = credential_;
  return OkStatus();
}

void NodeCredential::Forget() {
  if (credential_.empty()) return;
  MOE_LOG(WARNING) << "the controller does not know node " << node_
                   << "'s credential (its workers were forgotten, or its state was reset): "
                      "bootstrapping again";
  credential_.clear();
  ::unlink(path_.c_str());
}

Status NodeCredential::Bootstrap(moe::v1::WorkerService::Stub& stub) {
  grpc::ClientContext ctx;
  PrepareContext(&ctx, client_, 10);
  moe::v1::BootstrapRequest req;
  req.set_node(node_);
  req.set_rack(rack_);
  moe::v1::BootstrapResponse resp;
  const Status st = FromGrpc(stub.Bootstrap(&ctx, req, &resp));
  if (st.code() == StatusCode::kFailedPrecondition &&
      st.message().find("has no tokens") != std::string::npos) {
    plain_ = true;  // nothing to exchange: the token goes as it is
    return OkStatus();
  }
  if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded ||
      st.code() == StatusCode::kAlreadyExists || st.code() == StatusCode::kResourceExhausted) {
    // Unreachable, or the node's credential is held (a copy of this agent without its file): the
    // log says so, and the agent tries again.
    return UnavailableError("bootstrap of node " + node_ + ": " + st.message());
  }
  if (!st.ok())
    return Status(st.code(),
                  "bootstrap of node " + node_ + " with the worker token: " + st.message());
  MOE_RETURN_IF_ERROR(SaveSecret(path_, resp.credential()));
  credential_ = resp.credential();
  MOE_LOG(INFO) << "node " << node_ << " bootstrapped: its credential is in " << path_
                << " (mode 0600); the worker token is not presented again";
  return OkStatus();
}

}  // namespace moe::worker
