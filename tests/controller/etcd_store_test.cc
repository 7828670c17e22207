// The etcd store and the leader election against a real etcd (Debian's etcd-server), started here
// on loopback with a data directory of its own and stopped at the end.
#include "controller/etcd_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "controller/etcd_client.h"
#include "controller/leader_election.h"

namespace moe::controller {
namespace {

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), n);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

// One etcd member on loopback for the whole suite.
class Etcd : public ::testing::Environment {
 public:
  static std::string endpoint;
  void SetUp() override {
    const char* bin = "/usr/bin/etcd";
    ASSERT_EQ(::access(bin, X_OK), 0)
        << "LOUD: " << bin << " is missing: these tests need Debian's etcd-server (make test "
        << "installs it: scripts/install-deps.sh test)";
    dir_ = "/tmp/moe-etcd-test-" + std::to_string(::getpid());
    ASSERT_TRUE(RemoveAll(dir_).ok());
    const std::string client = "http://127.0.0.1:" + std::to_string(FreePort());
    const std::string peer = "http://127.0.0.1:" + std::to_string(FreePort());
    endpoint = client.substr(7);
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string log = dir_ + ".log";
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      ::execl(bin, bin, "--name", "t", "--data-dir", dir_.c_str(), "--listen-client-urls",
              client.c_str(), "--advertise-client-urls", client.c_str(), "--listen-peer-urls",
              peer.c_str(), "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster",
              ("t=" + peer).c_str(), "--max-txn-ops", "10000", nullptr);
      ::_exit(127);
    }
    EtcdTarget t;
    t.endpoints = {endpoint};
    EtcdClient c(t);
    const Status ready = c.WaitReady(30);
    ASSERT_TRUE(ready.ok()) << ready << " (log: " << dir_ << ".log)";
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    (void)RemoveAll(dir_);
    (void)RemoveAll(dir_ + ".log");
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};
std::string Etcd::endpoint;
const auto* const kEtcd = ::testing::AddGlobalTestEnvironment(new Etcd);

// A client on its own prefix: every test sees an empty store.
EtcdTarget Target(const std::string& test) {
  EtcdTarget t;
  t.endpoints = {Etcd::endpoint};
  t.prefix = "/test-" + test + "-" + std::to_string(::getpid());
  return t;
}

// Leads at once (nobody else campaigns on the prefix).
EtcdFence Lead(LeaderElection& e) {
  auto fence = e.Campaign([] { return false; }, [](const std::string&) {});
  EXPECT_TRUE(fence.ok()) << fence.status();
  return fence.ok() ? *fence : EtcdFence{};
}

TEST(EtcdStateStore, RecordsComeBackAsStoredInTheSqliteStoresOrder) {
  EtcdClient client(Target("records"));
  LeaderElection election(client, "127.0.0.1:1", 5);
  EtcdStateStore store(client, Lead(election));
  for (const auto& [id, created] :
       std::vector<std::pair<std::string, double>>{{"b", 5}, {"a", 5}, {"c", 1}}) {
    moe::v1::Job j;
    j.set_id(id);
    j.set_created_at(created);
    j.set_state(moe::v1::PENDING);
    ASSERT_TRUE(store.PutJob(j).ok());
  }
  moe::v1::Job replaced;
  replaced.set_id("a");
  replaced.set_created_at(5);
  replaced.set_state(moe::v1::RUNNING);
  replaced.add_events()->set_type("not stored with the job");
  for (int seq : {10, 2, 1}) {  // stored out of order; 10 after 2 (keys are zero-padded)
    moe::v1::JobEvent e;
    e.set_job_id("a");
    e.set_seq(seq);
    e.set_type("T" + std::to_string(seq));
    ASSERT_TRUE(store.PutJobWithEvent(replaced, e).ok());
  }
  auto jobs = store.LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id(), "c");  // by creation time, then id
  EXPECT_EQ((*jobs)[1].id(), "a");
  EXPECT_EQ((*jobs)[1].state(), moe::v1::RUNNING);
  EXPECT_EQ((*jobs)[1].events_size(), 0);
  auto events = store.LoadEvents("a");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].type(), "T1");
  EXPECT_EQ((*events)[2].type(), "T10");
  ASSERT_TRUE(store.DeleteJob("a").ok());
  EXPECT_EQ(store.LoadJobs()->size(), 2u);
  EXPECT_TRUE(store.LoadEvents("a")->empty());

  moe::v1::Worker w;
  w.set_name("w1");
  w.set_rack("r0");
  ASSERT_TRUE(store.PutWorker(w, "s:1").ok());  // a ':' in the session is kept
  w.set_drained(true);
  ASSERT_TRUE(store.PutWorker(w, "s:2").ok());
  w.set_name("w0");
  ASSERT_TRUE(store.PutWorker(w, "").ok());
  auto workers = store.LoadWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 2u);
  EXPECT_EQ((*workers)[0].info.name(), "w0");
  EXPECT_EQ((*workers)[1].session, "s:2");
  EXPECT_TRUE((*workers)[1].info.drained());
  ASSERT_TRUE(store.DeleteWorker("w0").ok());
  EXPECT_EQ(store.LoadWorkers()->size(), 1u);

  moe::v1::NodeCredential cred;
  cred.set_sha256("abc");
  cred.set_node("n1");
  ASSERT_TRUE(store.PutNodeCredential(cred).ok());
  EXPECT_EQ(store.LoadNodeCredentials()->size(), 1u);
  ASSERT_TRUE(store.DeleteNodeCredential("abc").ok());
  EXPECT_TRUE(store.LoadNodeCredentials()->empty());

  EXPECT_EQ(*store.StoredEpoch(), 0);
  EXPECT_EQ(*store.NextEpoch(), 1);
  EXPECT_EQ(*store.NextEpoch(), 2);
  EXPECT_EQ(*store.StoredEpoch(), 2);
}

TEST(EtcdStateStore, ABatchIsOneTransactionAllOrNothing) {
  EtcdClient client(Target("batch"));
  LeaderElection election(client, "127.0.0.1:1", 5);
  EtcdStateStore store(client, Lead(election));
  // More records than a page of the store's reads, in one batch.
  const Status st = store.Batch([&]() -> Status {
    for (int i = 0; i < 5000; ++i) {
      moe::v1::Job j;
      j.set_id("j" + std::to_string(i));
      MOE_RETURN_IF_ERROR(store.PutJob(j));
    }
    return OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(store.LoadJobs()->size(), 5000u);
  // A batch whose writes fail half-way stores none of them.
  const Status half = store.Batch([&]() -> Status {
    moe::v1::Job j;
    j.set_id("never");
    MOE_RETURN_IF_ERROR(store.PutJob(j));
    return InternalError("the second write failed");
  });
  EXPECT_FALSE(half.ok());
  EXPECT_EQ(store.LoadJobs()->size(), 5000u);
}

// The fencing case: a leader stalled past its lease (here: it stops keeping the lease
// alive, as a SIGSTOPped process does) resumes and writes. Its write must be refused and nothing of
// it stored, while the new leader's writes go through. Without the fence's comparison the stale
// write would be stored and this test would fail.
TEST(EtcdStateStore, AStalledExLeadersWritesAreRefusedAfterANewLeaderTookOver) {
  const EtcdTarget target = Target("fence");
  EtcdClient a_client(target), b_client(target);
  LeaderElection a(a_client, "127.0.0.1:1001", 2);
  EtcdStateStore a_store(a_client, Lead(a));
  moe::v1::Job before;
  before.set_id("written-while-leading");
  ASSERT_TRUE(a_store.PutJob(before).ok());
  EXPECT_TRUE(a_store.fenced().empty());

  // b campaigns while a is silent (its lease not kept alive): b leads once a's lease ran out.
  LeaderElection b(b_client, "127.0.0.1:1002", 2);
  std::vector<std::string> seen;
  const auto t0 = std::chrono::steady_clock::now();
  auto b_fence = b.Campaign([] { return false; }, [&](const std::string& l) { seen.push_back(l); });
  ASSERT_TRUE(b_fence.ok()) << b_fence.status();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 10.0) << "the lease is 2 s";
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), "127.0.0.1:1001");  // b saw a lead before it took over
  EXPECT_EQ(*b.Leader(), "127.0.0.1:1002");
  EtcdStateStore b_store(b_client, *b_fence);

  // a resumes: every kind of write is refused, a batch included, and nothing of them is stored.
  moe::v1::Job stale;
  stale.set_id("written-by-the-stale-leader");
  const Status put = a_store.PutJob(stale);
  EXPECT_EQ(put.code(), StatusCode::kFailedPrecondition) << put;
  EXPECT_NE(put.message().find("fenced"), std::string::npos) << put;
  EXPECT_FALSE(a_store.fenced().empty());
  const Status batch = a_store.Batch([&] { return a_store.PutJob(stale); });
  EXPECT_EQ(batch.code(), StatusCode::kFailedPrecondition) << batch;
  EXPECT_FALSE(a_store.NextEpoch().ok());
  EXPECT_FALSE(a_store.DeleteJob("written-while-leading").ok());

  // The new leader sees a's acknowledged write, not the refused ones, and writes itself.
  auto jobs = b_store.LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].id(), "written-while-leading");
  ASSERT_TRUE(b_store.PutJob(stale).ok());
  EXPECT_TRUE(b_store.fenced().empty());
}

TEST(LeaderElection, OneLeadsWhileItKeepsItsLeaseAndAStandbyTakesOverWhenItStepsDown) {
  const EtcdTarget target = Target("election");
  EtcdClient a_client(target), b_client(target);
  LeaderElection a(a_client, "A", 2);
  Lead(a);
  std::atomic<bool> lost{false};
  a.KeepLeading([&](const std::string&) { lost = true; });
  LeaderElection b(b_client, "B", 2);
  std::atomic<bool> b_leads{false}, give_up{false};
  std::string b_saw;
  std::thread campaign([&] {
    auto f = b.Campaign([&] { return give_up.load(); }, [&](const std::string& l) { b_saw = l; });
    b_leads = f.ok();
  });
  // Three lease lengths: a keeps its lease alive, so b waits.
  std::this_thread::sleep_for(std::chrono::seconds(6));
  EXPECT_FALSE(b_leads.load());
  EXPECT_FALSE(lost.load());
  EXPECT_EQ(*a.Leader(), "A");
  // a steps down: b leads within a poll or two, and a learns it lost.
  ASSERT_TRUE(a.StepDown().ok());
  for (int i = 0; i < 50 && !b_leads; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  give_up = true;
  campaign.join();
  EXPECT_TRUE(b_leads.load());
  EXPECT_EQ(b_saw, "A");
  EXPECT_EQ(*b.Leader(), "B");
  for (int i = 0; i < 30 && !lost; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(lost.load()) << "the ex-leader's keeper saw its lease revoked";
}

// A batch holds independent callers' writes: a key written twice, a job's event put and then the
// job deleted, a worker deleted and registered again. etcd refuses such a transaction as it is
// ("duplicate key given in txn request"); stored, it must leave what applying them in order would.
TEST(EtcdStateStore, ABatchThatWritesAKeyTwiceStoresWhatApplyingItInOrderWould) {
  EtcdClient client(Target("merge"));
  LeaderElection election(client, "127.0.0.1:1", 5);
  EtcdStateStore store(client, Lead(election));
  moe::v1::Job gone, kept;
  gone.set_id("gone");
  kept.set_id("kept");
  moe::v1::JobEvent e;
  e.set_job_id("gone");
  e.set_seq(1);
  moe::v1::Worker w;
  w.set_name("w0");
  const Status st = store.Batch([&]() -> Status {
    MOE_RETURN_IF_ERROR(store.PutJobWithEvent(gone, e));  // then deleted with its events
    MOE_RETURN_IF_ERROR(store.DeleteJob("gone"));
    e.set_job_id("kept");
    MOE_RETURN_IF_ERROR(store.DeleteJob("kept"));  // then stored again, with a new event
    kept.set_state(moe::v1::PENDING);
    MOE_RETURN_IF_ERROR(store.PutJobWithEvent(kept, e));
    kept.set_state(moe::v1::RUNNING);  // the same key again: the last wins
    MOE_RETURN_IF_ERROR(store.PutJob(kept));
    MOE_RETURN_IF_ERROR(store.PutWorker(w, "s1"));
    MOE_RETURN_IF_ERROR(store.DeleteWorker("w0"));
    return store.PutWorker(w, "s2");
  });
  ASSERT_TRUE(st.ok()) << st;
  auto jobs = store.LoadJobs();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].id(), "kept");
  EXPECT_EQ((*jobs)[0].state(), moe::v1::RUNNING);
  EXPECT_EQ(store.LoadEvents("kept")->size(), 1u);
  EXPECT_TRUE(store.LoadEvents("gone")->empty());
  auto workers = store.LoadWorkers();
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].session, "s2");
}

TEST(MergeOps, TheLastWriteOfAKeyWinsAndARangeDeleteIsCutAroundLaterPuts) {
  const auto put = [](const std::string& k) {
    etcdserverpb::RequestOp op;
    op.mutable_request_put()->set_key(k);
    op.mutable_request_put()->set_value(k);
    return op;
  };
  const auto del = [](const std::string& k, const std::string& end = "") {
    etcdserverpb::RequestOp op;
    op.mutable_request_delete_range()->set_key(k);
    op.mutable_request_delete_range()->set_range_end(end);
    return op;
  };
  const auto merged = MergeOps({put("a"), del("a"), put("b"), put("b"), put("e/1"), del("e/", "e0"),
                                put("e/2"), del("c"), put("c")});
  std::vector<std::string> seen;
  for (const auto& op : merged) {
    seen.push_back(op.has_request_put() ? "put " + op.request_put().key()
                                        : "del " + op.request_delete_range().key() + ".." +
                                              op.request_delete_range().range_end());
  }
  // a: deleted last; b: one put; e/1 gone with the range; e/2 put after it, the range cut around
  // it; c: put after its delete.
  const std::string zero(1, '\0');
  EXPECT_EQ(seen, (std::vector<std::string>{"del a..", "put b", "put c", "put e/2", "del e/..e/2",
                                            "del e/2" + zero + "..e0"}));
}

TEST(EtcdTarget, TheUrlIsCheckedPartByPart) {
  auto ok = ParseEtcdUrl("etcd://10.0.0.1:2379,etcd-1.etcd:2379/prod/");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->endpoints.size(), 2u);
  EXPECT_EQ(ok->endpoints[1], "etcd-1.etcd:2379");
  EXPECT_EQ(ok->prefix, "/prod");
  EXPECT_EQ(ParseEtcdUrl("etcd://h:1")->prefix, "/moe");
  for (const char* bad : {"http://h:1", "etcd://", "etcd://h", "etcd://h:", "etcd://h:/moe",
                          "etcd://h:0", "etcd://h:1,,h:2", "etcd://h:99999", "etcd://h:1/"}) {
    auto r = ParseEtcdUrl(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--store"), std::string::npos) << r.status();
  }
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
}

}  // namespace
}  // namespace moe::controller
