// moectl's connection to the controller: one JobService stub, a deadline on every call, and the
// exit codes scripts rely on.
//
// Exit codes: 0 ok; 1 other errors; 2 usage; 3 not found; 4 not allowed (token); 5 controller
// unreachable or too slow; 6 refused (invalid or infeasible request); watch: 0 when the job
// succeeded, 10 failed, 11 cancelled.
#pragma once

#include <google/protobuf/message.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/grpc_client.h"
#include "common/status.h"
#include "moe/v1/job_service.grpc.pb.h"

namespace moe::cli {

int ExitCodeFor(const Status& st);

struct Client {
  ClientOptions options;
  double timeout = 10;  // seconds, every unary call
  std::unique_ptr<moe::v1::JobService::Stub> stub;

  Status Connect();
  // One unary call. With several controller addresses (a leader and its standbys), a standby's
  // refusal or an address that cannot be reached moves on to the next one (FollowLeader), until
  // `timeout` has passed: a failover under way is waited out.
  template <typename Req, typename Resp, typename Method>
  Status Call(Method method, const Req& req, Resp* resp) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
    Status st;
    do {
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options, timeout);
      st = FromGrpc((stub.get()->*method)(&ctx, req, resp));
    } while (FollowLeader(st, until));
    return st;
  }
  // True when the call should go to the next address (reconnected to it): `st` says it was not
  // sent (a standby's refusal, or no connection made), there are other addresses to try, and
  // `until` has not passed.
  bool FollowLeader(const Status& st, std::chrono::steady_clock::time_point until =
                                          std::chrono::steady_clock::time_point::max());
  // Prints the error ("moectl: CODE: message", with a hint when the controller cannot be reached)
  // and returns its exit code.
  int Fail(const Status& st) const;
};

double NowSeconds();

// Where moectl connects, before its flags: the config file ($MOE_CONFIG, else
// $XDG_CONFIG_HOME/moectl/config.yaml, else ~/.config/moectl/config.yaml; keys controller,
// token_file, tls_ca, tls_cert, tls_key, timeout), then the environment ($MOE_CONTROLLER,
// $MOE_TOKEN, $MOE_TOKEN_FILE, $MOE_TLS_CA, $MOE_TLS_CERT, $MOE_TLS_KEY) over it; the flags
// override both, as kubectl's do. A file that is named but missing, or a key it does not know, is
// an error naming the file and the key; *source says which file was read ("" when none).
Status LoadConnectionDefaults(Client* c, std::string* token_file, std::string* source = nullptr);

// A watch that outlives a controller restart: Retry(st) is true (after a back-off of 0.5 s doubling
// to 5 s) while `st` is UNAVAILABLE (or CANCELLED: a call the controller cut as it shut down) and
// less than `give_up` seconds passed since the controller was last reached; it says on stderr that
// it lost the controller and, through Reached(), that it is back.
class Reconnect {
 public:
  explicit Reconnect(double give_up) : give_up_(give_up) {}
  bool Retry(const Status& st);
  void Reached();

 private:
  double give_up_, lost_at_ = 0, backoff_ = 0.5;
  bool lost_ = false;
};

}  // namespace moe::cli
