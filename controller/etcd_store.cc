#include "controller/etcd_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>

namespace moe::controller {

namespace {

using etcdserverpb::RequestOp;

RequestOp PutOp(std::string key, std::string value) {
  RequestOp op;
  op.mutable_request_put()->set_key(std::move(key));
  op.mutable_request_put()->set_value(std::move(value));
  return op;
}

RequestOp DeleteOp(std::string key, std::string range_end = "") {
  RequestOp op;
  op.mutable_request_delete_range()->set_key(std::move(key));
  if (!range_end.empty()) op.mutable_request_delete_range()->set_range_end(std::move(range_end));
  return op;
}

std::string Serialized(const google::protobuf::Message& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

template <typename Message>
StatusOr<Message> Parsed(const mvccpb::KeyValue& kv) {
  Message m;
  if (!m.ParseFromString(kv.value())) {
    return DataLossError("etcd key " + kv.key() + " does not hold a " +
                         std::string(Message::descriptor()->full_name()));
  }
  return m;
}

bool InRange(const std::string& key, const std::string& begin, const std::string& end) {
  return key >= begin && (end == std::string(1, '\0') || key < end);
}

// A try's error after which the transaction may have been applied (or may still be): the answer
// was lost, not refused. etcd refuses what it will never apply with these codes.
bool MaybeApplied(const Status& st) {
  return st.code() != StatusCode::kInvalidArgument && st.code() != StatusCode::kResourceExhausted &&
         st.code() != StatusCode::kOutOfRange && st.code() != StatusCode::kPermissionDenied &&
         st.code() != StatusCode::kUnauthenticated;
}

}  // namespace

// etcd refuses a transaction that puts a key twice, or puts a key inside a range it deletes
// ("duplicate key given in txn request"), and a batch holds independent callers' writes (a job's
// telemetry and its transition, a worker re-registered while its drain commits). This leaves what
// applying them in order would: the last put or delete of a key wins, a range delete drops the
// writes before it in its range and is cut around the puts after it.
std::vector<RequestOp> MergeOps(const std::vector<RequestOp>& ops) {
  std::map<std::string, RequestOp> last;                    // single keys: put or delete
  std::vector<std::pair<std::string, std::string>> ranges;  // deleted [begin, end)
  for (const RequestOp& op : ops) {
    if (op.has_request_put()) {
      const std::string& k = op.request_put().key();
      std::vector<std::pair<std::string, std::string>> cut;
      for (const auto& [b, e] : ranges) {
        if (!InRange(k, b, e)) {
          cut.emplace_back(b, e);
          continue;
        }
        if (b < k) cut.emplace_back(b, k);
        const std::string after = k + std::string(1, '\0');
        if (e == std::string(1, '\0') || after < e) cut.emplace_back(after, e);
      }
      ranges = std::move(cut);
      last[k] = op;
    } else if (op.has_request_delete_range() && op.request_delete_range().range_end().empty()) {
      last[op.request_delete_range().key()] = op;
    } else if (op.has_request_delete_range()) {
      const auto& d = op.request_delete_range();
      std::erase_if(last,
                    [&](const auto& kv) { return InRange(kv.first, d.key(), d.range_end()); });
      ranges.emplace_back(d.key(), d.range_end());
    }
  }
  std::vector<RequestOp> out;
  out.reserve(last.size() + ranges.size());
  for (auto& [k, op] : last) out.push_back(std::move(op));
  for (const auto& [b, e] : ranges) out.push_back(DeleteOp(b, e));
  return out;
}

namespace {

// The text of a refusal for size: what to change in etcd.
std::string SizeHint(const Status& st) {
  if (st.message().find("too many operations") != std::string::npos) {
    return " (start etcd with --max-txn-ops 10000 or more: a scheduling pass is one transaction)";
  }
  if (st.message().find("too large") != std::string::npos ||
      st.message().find("larger than max") != std::string::npos) {
    return " (start etcd with --max-request-bytes 33554432 or more)";
  }
  return "";
}

}  // namespace

EtcdStateStore::EtcdStateStore(EtcdClient& client, EtcdFence fence)
    : client_(client), fence_(std::move(fence)), prefix_(client.target().prefix) {}

std::string EtcdStateStore::Key(const std::string& kind, const std::string& name) const {
  return prefix_ + "/" + kind + "/" + name;
}

std::string EtcdStateStore::fenced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fenced_;
}

Status EtcdStateStore::Write(std::vector<RequestOp> ops) {
  if (in_batch_) {
    for (RequestOp& op : ops) batch_.push_back(std::move(op));
    return OkStatus();
  }
  return Commit(ops);
}

std::string EtcdStateStore::FenceMessage() const {
  return "fenced: this controller no longer leads (the leader key " + fence_.key +
         " is not the one it created at revision " + std::to_string(fence_.revision) +
         "); the write was refused";
}

Status EtcdStateStore::Fenced(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  fenced_ = why;
  return FailedPreconditionError(why);
}

// Where the store stands, in one read: whether the leader key is still the one this controller
// created, and how many writes were committed (the count key's version).
StatusOr<EtcdStateStore::Standing> EtcdStateStore::ReadStanding() {
  etcdserverpb::TxnRequest read;  // no compare: both ranges at one revision
  read.add_success()->mutable_request_range()->set_key(fence_.key);
  read.add_success()->mutable_request_range()->set_key(CommitsKey());
  MOE_ASSIGN_OR_RETURN(const etcdserverpb::TxnResponse r, client_.Txn(read));
  const auto& leader = r.responses(0).response_range();
  const auto& commits = r.responses(1).response_range();
  Standing s;
  s.leads = leader.kvs_size() == 1 && leader.kvs(0).create_revision() == fence_.revision;
  s.commits = commits.kvs_size() == 1 ? commits.kvs(0).version() : 0;
  return s;
}

etcdserverpb::TxnRequest EtcdStateStore::Guarded(const std::vector<RequestOp>& ops) const {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* guard = txn.add_compare();
  guard->set_key(fence_.key);
  guard->set_target(etcdserverpb::Compare::CREATE);
  guard->set_result(etcdserverpb::Compare::EQUAL);
  guard->set_create_revision(fence_.revision);
  etcdserverpb::Compare* count = txn.add_compare();
  count->set_key(CommitsKey());
  count->set_target(etcdserverpb::Compare::VERSION);
  count->set_result(etcdserverpb::Compare::EQUAL);
  count->set_version(commits_);
  for (RequestOp& op : MergeOps(ops)) *txn.add_success() = std::move(op);
  *txn.add_success() = PutOp(CommitsKey(), "");
  return txn;
}

// One fenced transaction, applied exactly once. A try whose answer is lost (a member gone, a raft
// leader lost with the proposal, a deadline) may have been applied, or may be applied later: the
// commit count settles it. Applied: the count is one more than this store knew. Not applied: it is
// sent again under the same count, so a late copy of the first try finds the count moved and
// changes nothing. Unsettled within kWriteSeconds: the controller stops (a standby reads what was
// stored), never reporting a write failed that may stand.
Status EtcdStateStore::Commit(const std::vector<RequestOp>& ops) {
  if (ops.empty()) return OkStatus();
  if (!fenced().empty()) return FailedPreconditionError(fenced());
  if (commits_ < 0) {
    MOE_ASSIGN_OR_RETURN(const Standing s, ReadStanding());
    if (!s.leads) return Fenced(FenceMessage());
    commits_ = s.commits;
  }
  const etcdserverpb::TxnRequest txn = Guarded(ops);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kWriteSeconds);
  while (true) {
    auto r = client_.TxnOnce(txn, kWriteTrySeconds);
    if (r.ok() && r->succeeded()) return ++commits_, OkStatus();
    if (!r.ok() && !MaybeApplied(r.status())) {  // refused as it stands (too large, malformed)
      return Status(r.status().code(), r.status().message() + SizeHint(r.status()));
    }
    auto s = ReadStanding();
    if (s.ok() && s->commits == commits_ + 1) return ++commits_, OkStatus();  // ours went in
    if (s.ok() && !s->leads) return Fenced(FenceMessage());
    if (s.ok() && s->commits != commits_) {
      return Fenced("the commit count of " + CommitsKey() + " moved to " +
                    std::to_string(s->commits) + " under this leader (" + std::to_string(commits_) +
                    " expected): another writer; this controller stops");
    }
    if (std::chrono::steady_clock::now() >= until) {
      return Fenced("etcd did not confirm a write within " + std::to_string(int(kWriteSeconds)) +
                    " s (" + (r.ok() ? std::string("refused") : r.status().message()) +
                    "); it may yet be stored: this controller stops and a standby reads the truth");
    }
  }
}

Status EtcdStateStore::Batch(const std::function<Status()>& writes) {
  if (in_batch_) return writes();
  in_batch_ = true;
  batch_.clear();
  Status st = writes();
  in_batch_ = false;
  if (st.ok()) st = Commit(batch_);
  batch_.clear();
  return st;
}

StatusOr<std::vector<mvccpb::KeyValue>> EtcdStateStore::Scan(const std::string& prefix) {
  constexpr int64_t kPage = 4096;
  std::vector<mvccpb::KeyValue> out;
  etcdserverpb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixEnd(prefix));
  request.set_limit(kPage);
  while (true) {
    MOE_ASSIGN_OR_RETURN(etcdserverpb::RangeResponse r, client_.Range(request));
    // The pages after the first read at the first's revision: one consistent view.
    if (request.revision() == 0) request.set_revision(r.header().revision());
    for (auto& kv : *r.mutable_kvs()) out.push_back(std::move(kv));
    if (!r.more() || r.kvs_size() == 0) return out;
    request.set_key(out.back().key() + std::string(1, '\0'));
  }
}

Status EtcdStateStore::PutJob(const moe::v1::Job& job) {
  moe::v1::Job copy = job;
  copy.clear_events();
  return Write({PutOp(Key("jobs", job.id()), Serialized(copy))});
}

Status EtcdStateStore::AppendEvent(const moe::v1::JobEvent& event) {
  char seq[24];
  std::snprintf(seq, sizeof(seq), "%020lld", static_cast<long long>(event.seq()));
  return Write({PutOp(Key("events", event.job_id()) + "/" + seq, Serialized(event))});
}

Status EtcdStateStore::PutJobWithEvent(const moe::v1::Job& job, const moe::v1::JobEvent& event) {
  return Batch([&]() -> Status {
    MOE_RETURN_IF_ERROR(PutJob(job));
    return AppendEvent(event);
  });
}

StatusOr<std::vector<moe::v1::Job>> EtcdStateStore::LoadJobs() {
  MOE_ASSIGN_OR_RETURN(const std::vector<mvccpb::KeyValue> kvs, Scan(prefix_ + "/jobs/"));
  std::vector<moe::v1::Job> jobs;
  jobs.reserve(kvs.size());
  for (const mvccpb::KeyValue& kv : kvs) {
    MOE_ASSIGN_OR_RETURN(moe::v1::Job job, Parsed<moe::v1::Job>(kv));
    jobs.push_back(std::move(job));
  }
  // As the SQLite store gives them: by creation time, then id.
  std::stable_sort(jobs.begin(), jobs.end(), [](const moe::v1::Job& a, const moe::v1::Job& b) {
    return a.created_at() != b.created_at() ? a.created_at() < b.created_at() : a.id() < b.id();
  });
  return jobs;
}

StatusOr<std::vector<moe::v1::JobEvent>> EtcdStateStore::LoadEvents(const std::string& job_id) {
  MOE_ASSIGN_OR_RETURN(const std::vector<mvccpb::KeyValue> kvs, Scan(Key("events", job_id) + "/"));
  std::vector<moe::v1::JobEvent> events;
  events.reserve(kvs.size());
  for (const mvccpb::KeyValue& kv : kvs) {
    MOE_ASSIGN_OR_RETURN(moe::v1::JobEvent e, Parsed<moe::v1::JobEvent>(kv));
    events.push_back(std::move(e));
  }
  return events;
}

Status EtcdStateStore::DeleteJob(const std::string& job_id) {
  const std::string events = Key("events", job_id) + "/";
  return Write({DeleteOp(Key("jobs", job_id)), DeleteOp(events, PrefixEnd(events))});
}

Status EtcdStateStore::PutWorker(const moe::v1::Worker& info, const std::string& session) {
  return Write({PutOp(Key("workers", info.name()),
                      std::to_string(session.size()) + ":" + session + Serialized(info))});
}

StatusOr<std::vector<StoredWorker>> EtcdStateStore::LoadWorkers() {
  MOE_ASSIGN_OR_RETURN(const std::vector<mvccpb::KeyValue> kvs, Scan(prefix_ + "/workers/"));
  std::vector<StoredWorker> out;
  out.reserve(kvs.size());
  for (const mvccpb::KeyValue& kv : kvs) {
    const std::string& v = kv.value();
    const size_t colon = v.find(':');
    const size_t n = colon == std::string::npos ? 0 : std::strtoull(v.c_str(), nullptr, 10);
    StoredWorker w;
    if (colon == std::string::npos || colon + 1 + n > v.size() ||
        !w.info.ParseFromString(v.substr(colon + 1 + n))) {
      return DataLossError("etcd key " + kv.key() + " does not hold a worker record");
    }
    w.session = v.substr(colon + 1, n);
    out.push_back(std::move(w));
  }
  return out;  // in name order, as the SQLite store gives them
}

Status EtcdStateStore::DeleteWorker(const std::string& name) {
  return Write({DeleteOp(Key("workers", name))});
}

Status EtcdStateStore::PutNodeCredential(const moe::v1::NodeCredential& c) {
  return Write({PutOp(Key("credentials", c.sha256()), Serialized(c))});
}

StatusOr<std::vector<moe::v1::NodeCredential>> EtcdStateStore::LoadNodeCredentials() {
  MOE_ASSIGN_OR_RETURN(const std::vector<mvccpb::KeyValue> kvs, Scan(prefix_ + "/credentials/"));
  std::vector<moe::v1::NodeCredential> out;
  for (const mvccpb::KeyValue& kv : kvs) {
    MOE_ASSIGN_OR_RETURN(moe::v1::NodeCredential c, Parsed<moe::v1::NodeCredential>(kv));
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.node() < b.node();  // as the SQLite store gives them
  });
  return out;
}

Status EtcdStateStore::DeleteNodeCredential(const std::string& sha256) {
  return Write({DeleteOp(Key("credentials", sha256))});
}

// Read, then written under the fence: only the leader writes the epoch, so no other write can come
// between (a stale leader's is refused).
StatusOr<int64_t> EtcdStateStore::NextEpoch() {
  MOE_ASSIGN_OR_RETURN(const int64_t now, StoredEpoch());
  MOE_RETURN_IF_ERROR(Write({PutOp(prefix_ + "/epoch", std::to_string(now + 1))}));
  return now + 1;
}

StatusOr<int64_t> EtcdStateStore::StoredEpoch() {
  etcdserverpb::RangeRequest request;
  request.set_key(prefix_ + "/epoch");
  MOE_ASSIGN_OR_RETURN(const etcdserverpb::RangeResponse r, client_.Range(request));
  if (r.kvs_size() == 0) return int64_t{0};
  return static_cast<int64_t>(std::strtoll(r.kvs(0).value().c_str(), nullptr, 10));
}

}  // namespace moe::controller
