#include "controller/etcd_client.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/grpc_client.h"

namespace moe::controller {

namespace {

constexpr char kScheme[] = "etcd://";

Status CheckEndpoint(const std::string& e, const std::string& url) {
  const size_t colon = e.rfind(':');
  const std::string port = colon == std::string::npos ? "" : e.substr(colon + 1);
  char* end = nullptr;
  const long p = port.empty() ? 0 : std::strtol(port.c_str(), &end, 10);
  if (colon == 0 || colon == std::string::npos || port.empty() || *end != 0 || p <= 0 ||
      p > 65535) {
    return InvalidArgumentError("--store " + url + ": the etcd endpoint '" + e +
                                "' is not host:port (a port from 1 to 65535)");
  }
  return OkStatus();
}

}  // namespace

StatusOr<EtcdTarget> ParseEtcdUrl(const std::string& url) {
  if (url.rfind(kScheme, 0) != 0) {
    return InvalidArgumentError("--store " + url +
                                ": expected etcd://host:port[,host:port...][/prefix]");
  }
  std::string rest = url.substr(sizeof(kScheme) - 1);
  EtcdTarget t;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    t.prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (t.prefix.size() > 1 && t.prefix.back() == '/') t.prefix.pop_back();
    if (t.prefix == "/") {
      return InvalidArgumentError("--store " + url +
                                  ": the key prefix is empty (leave it out for /moe, or name one)");
    }
  }
  size_t at = 0;
  while (at <= rest.size()) {
    const size_t comma = rest.find(',', at);
    const std::string e =
        rest.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    MOE_RETURN_IF_ERROR(CheckEndpoint(e, url));
    t.endpoints.push_back(e);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return t;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(const EtcdTarget& target, double deadline_seconds)
    : target_(target), deadline_seconds_(deadline_seconds) {
  for (const std::string& e : target_.endpoints) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);  // a Range over every job of a large cluster
    args.SetMaxSendMessageSize(64 << 20);
    // Come back quickly once a member is back: a restarted etcd member must not wait out gRPC's
    // reconnect back-off (up to 120 s) before this controller uses it again.
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    Member m;
    m.endpoint = e;
    m.channel = grpc::CreateCustomChannel(e, grpc::InsecureChannelCredentials(), args);
    m.kv = etcdserverpb::KV::NewStub(m.channel);
    m.lease = etcdserverpb::Lease::NewStub(m.channel);
    members_.push_back(std::move(m));
  }
}

// A try that failed for its member (UNAVAILABLE: unreachable; DEADLINE_EXCEEDED: a proposal lost
// with a raft leader, which etcd answers only at its own request timeout, 7 s) goes to the next
// member, for up to deadline_seconds_ in all. Safe to send again: every write the controller makes
// is a put or a delete of a whole record (a second apply leaves the same state), each under the
// leader's fence.
template <typename Call>
Status EtcdClient::OnSomeMember(const char* what, Call call, double budget_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + std::chrono::duration<double>(
                                        budget_seconds > 0 ? budget_seconds : deadline_seconds_);
  const size_t first = current_.load();
  Status st;
  size_t m = first;
  for (size_t attempt = 0;; ++attempt) {
    m = (first + attempt) % members_.size();
    grpc::ClientContext ctx;
    const auto try_until =
        std::min(until, Clock::now() + std::chrono::duration<double>(kTrySeconds));
    ctx.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(try_until - Clock::now()));
    st = FromGrpc(call(members_[m], &ctx));
    if (st.ok()) {
      current_.store(m);
      return st;
    }
    const bool member_failed =
        st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded;
    if (!member_failed || Clock::now() >= until) break;
    // A whole round failed: an election under way, or every member away. A breath before the next.
    if ((attempt + 1) % members_.size() == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status(st.code(), std::string("etcd ") + what + " at " + members_[m].endpoint +
                               " (--store): " + st.message());
}

StatusOr<etcdserverpb::TxnResponse> EtcdClient::TxnOnce(const etcdserverpb::TxnRequest& request,
                                                        double seconds) {
  const size_t m = current_.load() % members_.size();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(
                       std::chrono::duration<double>(seconds)));
  etcdserverpb::TxnResponse response;
  const Status st = FromGrpc(members_[m].kv->Txn(&ctx, request, &response));
  if (st.ok()) return response;
  current_.store(m + 1);  // the next try, whatever it is, goes to another member
  return Status(st.code(), "etcd txn at " + members_[m].endpoint + " (--store): " + st.message());
}

StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(const etcdserverpb::RangeRequest& request) {
  etcdserverpb::RangeResponse response;
  MOE_RETURN_IF_ERROR(OnSomeMember("range", [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->Range(ctx, request, &response);
  }));
  return response;
}

StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse response;
  MOE_RETURN_IF_ERROR(OnSomeMember("txn", [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->Txn(ctx, request, &response);
  }));
  return response;
}

StatusOr<int64_t> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  MOE_RETURN_IF_ERROR(OnSomeMember("lease grant", [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseGrant(ctx, request, &response);
  }));
  if (!response.error().empty()) return UnavailableError("etcd lease grant: " + response.error());
  return response.id();
}

// etcd offers keep-alives as a stream only: one request and its answer on a short stream.
StatusOr<int64_t> EtcdClient::LeaseKeepAlive(int64_t lease, double budget_seconds) {
  etcdserverpb::LeaseKeepAliveResponse response;
  const auto once = [&](Member& m, grpc::ClientContext* ctx) {
    auto stream = m.lease->LeaseKeepAlive(ctx);
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    if (!stream->Write(request) || !stream->Read(&response)) {
      stream->WritesDone();
      const grpc::Status st = stream->Finish();
      return st.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream ended") : st;
    }
    stream->WritesDone();
    ctx->TryCancel();  // the answer is in; the stream's end is of no interest
    stream->Finish();
    return grpc::Status::OK;
  };
  MOE_RETURN_IF_ERROR(OnSomeMember("lease keep-alive", once, budget_seconds));
  return response.ttl();
}

Status EtcdClient::LeaseRevoke(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return OnSomeMember("lease revoke", [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseRevoke(ctx, request, &response);
  });
}

Status EtcdClient::WaitReady(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  etcdserverpb::RangeRequest probe;
  probe.set_key(target_.prefix + "/epoch");
  while (true) {
    auto r = Range(probe);
    if (r.ok()) return OkStatus();
    if (std::chrono::steady_clock::now() >= until) {
      return UnavailableError("no etcd member answered within " +
                              std::to_string(static_cast<int>(seconds)) + " s (" +
                              r.status().message() + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace moe::controller
