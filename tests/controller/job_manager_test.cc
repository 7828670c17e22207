// JobManager on its own: the state machine, numbered events, the store-then-apply-then-notify path
// (a refused write changes nothing and tells no one), metrics' rate-limited storing, loading, and
// the JobWatchers that subscribe to it.
#include "controller/job_manager.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <thread>

#include "common/job_spec_proto.h"
#include "controller/admission.h"
#include "controller/job_watchers.h"
#include "tests/controller/flaky_store.h"

namespace moe::controller {
namespace {

using moe::v1::JobState;

JobSpec Spec(const std::string& name) {
  JobSpec s;
  s.name = name;
  s.model = *ModelPreset("tiny");
  s.parallelism.world_size = 2;
  s.parallelism.expert_parallel = 2;
  s.data.path = "data/fortunes";
  s.data.micro_batch_size = 1;
  s.data.global_batch_size = 2;
  s.checkpoint.dir = "/tmp/ckpt-" + name;
  return s;
}

// Writes down every call, in order.
class Recorder final : public JobListener {
 public:
  void OnJobStateChanged(const moe::v1::Job& job, JobState from) override {
    calls.push_back("state " + job.id() + " " + moe::v1::JobState_Name(from) + "->" +
                    moe::v1::JobState_Name(job.state()));
  }
  void OnJobEventRecorded(const moe::v1::Job& job, const moe::v1::JobEvent& ev) override {
    calls.push_back("event " + job.id() + " #" + std::to_string(ev.seq()) + " " + ev.type());
  }
  void OnJobMetrics(const moe::v1::Job& job, const moe::v1::StepMetrics& m) override {
    calls.push_back("metrics " + job.id() + " step " + std::to_string(m.step()));
  }
  std::vector<std::string> calls;
};

class JobManagerTest : public ::testing::Test {
 protected:
  JobManagerTest() {
    jobs_.AddListener(&recorder_);
    jobs_.AddListener(&watchers_);
  }
  JobEntry* NewJob(const std::string& name = "j") {
    const JobSpec spec = Spec(name);
    auto e = jobs_.Create(jobs_.NewId(name), SpecToProto(spec), spec);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *e : nullptr;
  }
  std::vector<moe::v1::JobEvent> Stored(const std::string& id) { return *store_.LoadEvents(id); }
  static Status ToScheduled(JobManager& jobs, JobEntry& e) {
    return jobs.Transition(e, moe::v1::SCHEDULED, "Scheduled", "attempt 1", [](moe::v1::Job& j) {
      j.set_attempt(1);
      j.add_placement()->set_worker("w0");
    });
  }

  FakeClock clock_;
  FlakyStateStore store_;
  JobManager jobs_{store_, clock_};
  Recorder recorder_;
  JobWatchers watchers_;
};

TEST(JobStateMachine, TransitionsFollowTheLifecycle) {
  using namespace moe::v1;
  EXPECT_TRUE(ValidTransition(PENDING, SCHEDULED));
  EXPECT_TRUE(ValidTransition(PENDING, CANCELLED));
  EXPECT_TRUE(ValidTransition(SCHEDULED, RUNNING));
  EXPECT_TRUE(ValidTransition(SCHEDULED, SUCCEEDED))
      << "a short job may end before its first step report";
  EXPECT_TRUE(ValidTransition(RUNNING, RESTARTING));
  EXPECT_TRUE(ValidTransition(RUNNING, SUCCEEDED));
  EXPECT_TRUE(ValidTransition(RUNNING, CANCELLED));
  EXPECT_TRUE(ValidTransition(RESTARTING, SCHEDULED));
  EXPECT_TRUE(ValidTransition(RESTARTING, FAILED));
  EXPECT_FALSE(ValidTransition(PENDING, RUNNING)) << "placed before running";
  EXPECT_FALSE(ValidTransition(PENDING, RESTARTING));
  EXPECT_FALSE(ValidTransition(PENDING, SUCCEEDED));
  EXPECT_FALSE(ValidTransition(RESTARTING, RUNNING)) << "a restart is placed again first";
  EXPECT_FALSE(ValidTransition(RUNNING, RUNNING));
  for (JobState end : {SUCCEEDED, FAILED, CANCELLED}) {
    EXPECT_TRUE(IsTerminal(end));
    EXPECT_FALSE(IsQueued(end));
    for (JobState to : {PENDING, SCHEDULED, RUNNING, RESTARTING, SUCCEEDED, FAILED, CANCELLED}) {
      EXPECT_FALSE(ValidTransition(end, to)) << JobState_Name(end) << " -> " << JobState_Name(to);
    }
  }
  EXPECT_TRUE(IsQueued(PENDING));
  EXPECT_TRUE(IsQueued(RESTARTING));
  EXPECT_FALSE(IsQueued(RUNNING));
}

TEST_F(JobManagerTest, CreateStoresAPendingJobWithItsSubmittedEvent) {
  JobEntry* e = NewJob("tiny");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->job.id().rfind("tiny-", 0), 0u) << e->job.id();
  EXPECT_EQ(e->job.state(), moe::v1::PENDING);
  EXPECT_EQ(e->job.created_at(), clock_.Now());
  EXPECT_EQ(jobs_.Find(e->job.id()), e);
  ASSERT_EQ(store_.LoadJobs()->size(), 1u);
  const auto events = Stored(e->job.id());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].seq(), 1);
  EXPECT_EQ(events[0].type(), "Submitted");
  EXPECT_NE(events[0].message().find("2 ranks (EP 2"), std::string::npos) << events[0].message();
  const std::string id = e->job.id();
  EXPECT_EQ(recorder_.calls,
            (std::vector<std::string>{"event " + id + " #1 Submitted",
                                      "state " + id + " JOB_STATE_UNSPECIFIED->PENDING"}));
  EXPECT_EQ(jobs_.CountQueued(), 1u);
  EXPECT_EQ(jobs_.Create(id, SpecToProto(Spec("tiny")), Spec("tiny")).status().code(),
            StatusCode::kAlreadyExists);
}

TEST_F(JobManagerTest, TransitionsStoreNumberedEventsThenTellListenersEventFirst) {
  JobEntry* e = NewJob();
  const std::string id = e->job.id();
  recorder_.calls.clear();
  clock_.Advance(2);
  ASSERT_TRUE(ToScheduled(jobs_, *e).ok());
  EXPECT_EQ(e->job.attempt(), 1) << "the edit is part of the new record";
  EXPECT_EQ(e->job.updated_at(), clock_.Now());
  ASSERT_TRUE(jobs_.Event(*e, "Note", "no state change").ok());
  ASSERT_TRUE(jobs_.Transition(*e, moe::v1::RUNNING, "Running", "training").ok());
  ASSERT_TRUE(jobs_.Transition(*e, moe::v1::SUCCEEDED, "Succeeded", "done").ok());
  EXPECT_EQ(e->job.message(), "done");
  const auto events = Stored(id);
  ASSERT_EQ(events.size(), 5u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq(), static_cast<int64_t>(i + 1));
  }
  EXPECT_EQ(events[1].state(), moe::v1::SCHEDULED) << "an event carries the state it led to";
  EXPECT_EQ(events[1].attempt(), 1);
  EXPECT_EQ(events[2].state(), moe::v1::SCHEDULED);
  EXPECT_EQ(store_.LoadJobs()->at(0).state(), moe::v1::SUCCEEDED)
      << "the record is stored with the event";
  EXPECT_EQ(recorder_.calls,
            (std::vector<std::string>{
                "event " + id + " #2 Scheduled", "state " + id + " PENDING->SCHEDULED",
                "event " + id + " #3 Note", "event " + id + " #4 Running",
                "state " + id + " SCHEDULED->RUNNING", "event " + id + " #5 Succeeded",
                "state " + id + " RUNNING->SUCCEEDED"}));
}

TEST_F(JobManagerTest, AnInvalidTransitionIsRefusedAndChangesNothing) {
  JobEntry* e = NewJob();
  recorder_.calls.clear();
  Status st = jobs_.Transition(*e, moe::v1::RUNNING, "Running", "");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("cannot go from PENDING to RUNNING"), std::string::npos) << st;
  EXPECT_EQ(e->job.state(), moe::v1::PENDING);
  EXPECT_EQ(Stored(e->job.id()).size(), 1u);
  EXPECT_TRUE(recorder_.calls.empty());
  ASSERT_TRUE(jobs_.Transition(*e, moe::v1::CANCELLED, "Cancelled", "by a user").ok());
  EXPECT_EQ(jobs_.Transition(*e, moe::v1::FAILED, "Failed", "").code(),
            StatusCode::kFailedPrecondition)
      << "an ended job stays ended";
}

TEST_F(JobManagerTest, ARefusedWriteLeavesMemoryAsItWasAndTellsNoOne) {
  JobEntry* e = NewJob();
  const moe::v1::Job before = e->job;
  recorder_.calls.clear();
  store_.fail_writes = true;
  Status st = ToScheduled(jobs_, *e);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_EQ(e->job.SerializeAsString(), before.SerializeAsString())
      << "state, attempt and placement unchanged";
  EXPECT_EQ(jobs_.Event(*e, "Note", "").code(), StatusCode::kUnavailable);
  EXPECT_EQ(e->next_event_seq, 2) << "no sequence number is spent on a refused event";
  EXPECT_TRUE(recorder_.calls.empty());
  EXPECT_EQ(store_.refused, 2);
  // A refused submission leaves no job behind.
  const size_t known = jobs_.All().size();
  EXPECT_FALSE(jobs_.Create(jobs_.NewId("other"), SpecToProto(Spec("other")), Spec("other")).ok());
  EXPECT_EQ(jobs_.All().size(), known);
  // Once the store takes writes again, the same change goes through with the next number.
  store_.fail_writes = false;
  ASSERT_TRUE(ToScheduled(jobs_, *e).ok());
  const auto events = Stored(e->job.id());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].seq(), 2);
  EXPECT_EQ(e->job.state(), moe::v1::SCHEDULED);
}

TEST_F(JobManagerTest, MetricsArePublishedEveryStepAndStoredAtMostEveryFewSeconds) {
  JobEntry* e = NewJob();
  const std::string id = e->job.id();
  recorder_.calls.clear();
  moe::v1::StepMetrics m;
  m.set_step(1);
  ASSERT_TRUE(jobs_.PublishMetrics(*e, m).ok());
  EXPECT_EQ(e->job.last_metrics().step(), 1);
  EXPECT_EQ(store_.LoadJobs()->at(0).last_metrics().step(), 0)
      << "stored at submit, less than 5 s ago";
  clock_.Advance(JobManager::kMetricsPersistSeconds);
  m.set_step(2);
  ASSERT_TRUE(jobs_.PublishMetrics(*e, m).ok());
  EXPECT_EQ(store_.LoadJobs()->at(0).last_metrics().step(), 2);
  clock_.Advance(JobManager::kMetricsPersistSeconds);
  store_.fail_writes = true;
  m.set_step(3);
  EXPECT_FALSE(jobs_.PublishMetrics(*e, m).ok());
  EXPECT_EQ(e->job.last_metrics().step(), 2) << "a refused write changes nothing";
  EXPECT_EQ(recorder_.calls,
            (std::vector<std::string>{"metrics " + id + " step 1", "metrics " + id + " step 2"}));
}

// CountQueued is kept as the jobs change, not counted: it agrees with a count of the states through
// creates (one refused), transitions in and out of the queue (one refused), metrics' saves, deletes
// and a load.
TEST_F(JobManagerTest, TheQueuedCountFollowsEveryChange) {
  auto counted = [](JobManager& jobs) {
    size_t n = 0;
    for (JobEntry* e : jobs.All()) n += IsQueued(e->job.state()) ? 1 : 0;
    return n;
  };
  // The indexes a pass and ListQueues walk agree with a walk over every job: the queued, those
  // with an attempt, and the waiting count by queue (queued without an attempt).
  auto indexes_agree = [&](const char* after) {
    std::vector<JobEntry*> queued, with_attempt;
    int64_t waiting = 0;
    for (JobEntry* e : jobs_.All()) {
      if (IsQueued(e->job.state())) queued.push_back(e);
      if (e->attempt) with_attempt.push_back(e);
      waiting += IsQueued(e->job.state()) && !e->attempt ? 1 : 0;
    }
    EXPECT_EQ(jobs_.Queued(), queued) << after;
    EXPECT_EQ(jobs_.WithAttempt(), with_attempt) << after;
    int64_t counted_waiting = 0;
    for (const auto& [queue, n] : jobs_.WaitingByQueue()) counted_waiting += n;
    EXPECT_EQ(counted_waiting, waiting) << after;
  };
  auto agrees = [&](size_t want, const char* after) {
    EXPECT_EQ(jobs_.CountQueued(), want) << after;
    EXPECT_EQ(counted(jobs_), want) << after;
    indexes_agree(after);
  };
  auto attempt = [&](JobEntry& e, bool on) {
    e.attempt = on ? std::make_unique<Attempt>() : nullptr;
    jobs_.AttemptChanged(e);
  };
  JobEntry* a = NewJob("a");
  JobEntry* b = NewJob("b");
  agrees(2, "two submits");
  store_.fail_writes = true;
  EXPECT_FALSE(jobs_.Create(jobs_.NewId("c"), SpecToProto(Spec("c")), Spec("c")).ok());
  agrees(2, "a refused submit");
  EXPECT_FALSE(ToScheduled(jobs_, *a).ok());
  agrees(2, "a refused placement");
  store_.fail_writes = false;
  ASSERT_TRUE(ToScheduled(jobs_, *a).ok());
  attempt(*a, true);
  agrees(1, "a placed");
  ASSERT_TRUE(jobs_.Transition(*a, moe::v1::RUNNING, "Running", "").ok());
  ASSERT_TRUE(jobs_.Transition(*a, moe::v1::RESTARTING, "Restarting", "a rank was lost").ok());
  agrees(2, "a restarting, its ranks still stopping");
  attempt(*a, false);
  agrees(2, "a restarting, its ranks stopped");
  clock_.Advance(JobManager::kMetricsPersistSeconds);
  moe::v1::StepMetrics m;
  m.set_step(1);
  ASSERT_TRUE(jobs_.PublishMetrics(*b, m).ok());
  agrees(2, "b's metrics saved");
  ASSERT_TRUE(jobs_.Transition(*b, moe::v1::CANCELLED, "Cancelled", "").ok());
  agrees(1, "b cancelled");
  ASSERT_TRUE(jobs_.Delete(b->job.id()).ok()) << "the entry's own id: read before it goes";
  agrees(1, "b deleted");
  JobManager restarted(store_, clock_);
  ASSERT_TRUE(restarted.Load().ok());
  EXPECT_EQ(restarted.CountQueued(), 1u) << "after a load";
  EXPECT_EQ(restarted.Queued().size(), 1u);
  EXPECT_EQ(restarted.WaitingByQueue().size(), 1u);
}

// A ListJobs page walks the jobs by (created_at, id) from its token, taking those its filter does.
TEST_F(JobManagerTest, CreatedAfterWalksTheJobsInCreationOrderFromAToken) {
  std::vector<JobEntry*> made;
  for (const char* name : {"a", "b", "c", "d"}) {
    made.push_back(NewJob(name));
    clock_.Advance(1);
  }
  const auto all = [](const JobEntry&) { return true; };
  auto ids = [](const std::vector<const JobEntry*>& es) {
    std::vector<std::string> out;
    for (const JobEntry* e : es) out.push_back(e->spec.name);
    return out;
  };
  EXPECT_EQ(ids(jobs_.CreatedAfter({-1, ""}, 10, all)),
            (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(ids(jobs_.CreatedAfter({-1, ""}, 2, all)), (std::vector<std::string>{"a", "b"}));
  const moe::v1::Job& b = made[1]->job;
  EXPECT_EQ(ids(jobs_.CreatedAfter({b.created_at(), b.id()}, 10, all)),
            (std::vector<std::string>{"c", "d"}))
      << "strictly after the token's job";
  EXPECT_EQ(
      ids(jobs_.CreatedAfter({-1, ""}, 10, [](const JobEntry& e) { return e.spec.name != "c"; })),
      (std::vector<std::string>{"a", "b", "d"}));
  ASSERT_TRUE(jobs_.Transition(*made[0], moe::v1::CANCELLED, "Cancelled", "").ok());
  ASSERT_TRUE(jobs_.Delete(made[0]->job.id()).ok());
  EXPECT_EQ(ids(jobs_.CreatedAfter({-1, ""}, 10, all)), (std::vector<std::string>{"b", "c", "d"}))
      << "a deleted job leaves the index";
}

// The indexes a submit's checks use instead of a walk over every job: by request id, and the jobs
// whose checkpoint directory equals, holds or lies inside a given one (ancestors at a '/', not a
// shared prefix of a name), the ones being created included, a deleted one gone.
TEST_F(JobManagerTest, TheIndexesFindRequestIdsAndCheckpointNeighbours) {
  jobs_.SetCheckpointKey([](const std::string& dir) { return dir; });
  auto make = [&](const std::string& name, const std::string& dir, const std::string& request) {
    JobSpec spec = Spec(name);
    spec.checkpoint.dir = dir;
    auto e = jobs_.Create(jobs_.NewId(name), SpecToProto(spec), spec, request);
    EXPECT_TRUE(e.ok()) << e.status();
    return *e;
  };
  JobEntry* outer = make("outer", "/ck/team", "r-1");
  JobEntry* inner = make("inner", "/ck/team/a/b", "");
  JobEntry* same = make("same", "/ck/team/a", "r-3");
  make("sibling", "/ck/teammate", "");  // a prefix of the name, not of the path
  make("elsewhere", "/other/a", "");
  EXPECT_EQ(jobs_.FindByRequestId("r-1"), outer);
  EXPECT_EQ(jobs_.FindByRequestId("r-3"), same);
  EXPECT_EQ(jobs_.FindByRequestId("r-2"), nullptr);
  auto names = [&](const std::string& key) {
    std::set<std::string> out;
    for (JobEntry* e : jobs_.CheckpointNeighbours(key)) out.insert(e->spec.name);
    return out;
  };
  EXPECT_EQ(names("/ck/team/a"), (std::set<std::string>{"outer", "inner", "same"}));
  EXPECT_EQ(names("/ck/team"), (std::set<std::string>{"outer", "inner", "same"}));
  EXPECT_EQ(names("/ck"), (std::set<std::string>{"outer", "inner", "same", "sibling"}));
  EXPECT_EQ(names("/ck/team/a/b/c"), (std::set<std::string>{"outer", "inner", "same"}));
  EXPECT_EQ(names("/nowhere"), std::set<std::string>{});
  EXPECT_EQ(names("/").size(), 5u) << "every directory lies inside /";
  ASSERT_TRUE(jobs_.Transition(*inner, moe::v1::CANCELLED, "Cancelled", "by a test").ok());
  ASSERT_TRUE(jobs_.Delete(inner->job.id()).ok());
  EXPECT_EQ(names("/ck/team"), (std::set<std::string>{"outer", "same"}));
  EXPECT_EQ(outer->resolved_checkpoint_dir, "/ck/team") << "the key is kept with the job";
}

TEST_F(JobManagerTest, LoadAnnouncesEachJobAndContinuesItsEventNumbers) {
  JobEntry* e = NewJob();
  const std::string id = e->job.id();
  ASSERT_TRUE(ToScheduled(jobs_, *e).ok());
  JobManager restarted(store_, clock_);
  Recorder recorder;
  restarted.AddListener(&recorder);
  ASSERT_TRUE(restarted.Load().ok());
  JobEntry* loaded = restarted.Find(id);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->job.state(), moe::v1::SCHEDULED);
  EXPECT_EQ(loaded->spec.parallelism.world_size, 2);
  EXPECT_EQ(recorder.calls,
            (std::vector<std::string>{"state " + id + " JOB_STATE_UNSPECIFIED->SCHEDULED"}));
  ASSERT_TRUE(restarted.Event(*loaded, "ControllerRestarted", "").ok());
  EXPECT_EQ(Stored(id).back().seq(), 3);
}

TEST_F(JobManagerTest, AWatcherGetsTheSnapshotThePastThenNewEventsAndMetricsThenTheEnd) {
  JobEntry* e = NewJob();
  JobEntry* other = NewJob("other");
  ASSERT_TRUE(ToScheduled(jobs_, *e).ok());
  std::vector<moe::v1::WatchJobResponse> got;
  const int64_t sub =
      watchers_.Watch(e->job, *jobs_.Events(e->job.id()), [&](const auto& r) { got.push_back(r); });
  EXPECT_NE(sub, 0);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].job().state(), moe::v1::SCHEDULED);
  EXPECT_EQ(got[1].event().type(), "Submitted");
  EXPECT_EQ(got[2].event().type(), "Scheduled");
  ASSERT_TRUE(jobs_.Event(*other, "Elsewhere", "").ok());
  EXPECT_EQ(got.size(), 3u) << "another job's events are not this stream's";
  moe::v1::StepMetrics m;
  m.set_step(7);
  ASSERT_TRUE(jobs_.PublishMetrics(*e, m).ok());
  ASSERT_TRUE(jobs_.Transition(*e, moe::v1::RUNNING, "Running", "").ok());
  ASSERT_TRUE(jobs_.Transition(*e, moe::v1::SUCCEEDED, "Succeeded", "").ok());
  ASSERT_EQ(got.size(), 7u);
  EXPECT_EQ(got[3].metrics().step(), 7);
  EXPECT_EQ(got[4].event().type(), "Running");
  EXPECT_EQ(got[5].event().type(), "Succeeded");
  EXPECT_EQ(got[6].job().state(), moe::v1::SUCCEEDED) << "the final snapshot ends the stream";
  EXPECT_EQ(watchers_.size(), 0u);
}

TEST_F(JobManagerTest, WatchingAnEndedJobSendsEverythingAtOnceAndUnwatchStopsAStream) {
  JobEntry* done = NewJob();
  ASSERT_TRUE(jobs_.Transition(*done, moe::v1::CANCELLED, "Cancelled", "").ok());
  std::vector<moe::v1::WatchJobResponse> got;
  EXPECT_EQ(watchers_.Watch(done->job, *jobs_.Events(done->job.id()),
                            [&](const auto& r) { got.push_back(r); }),
            0);
  ASSERT_EQ(got.size(), 4u);  // snapshot, Submitted, Cancelled, final snapshot
  EXPECT_EQ(got.back().job().state(), moe::v1::CANCELLED);
  EXPECT_EQ(watchers_.size(), 0u);

  JobEntry* live = NewJob("live");
  int calls = 0;
  const int64_t sub = watchers_.Watch(live->job, {}, [&](const auto&) { ++calls; });
  EXPECT_EQ(calls, 1);
  watchers_.Unwatch(sub);
  ASSERT_TRUE(jobs_.Event(*live, "Note", "").ok());
  EXPECT_EQ(calls, 1);
}

// Watchers are kept by job: each job's reach its own streams alone, two streams of one job each get
// every message, and one unwatched leaves the other (and the count) right.
TEST_F(JobManagerTest, WatchersOfOneJobEachGetItsMessagesAndNoOtherJobs) {
  JobEntry* a = NewJob("a");
  JobEntry* b = NewJob("b");
  int a1 = 0, a2 = 0, b1 = 0;
  const int64_t s1 = watchers_.Watch(a->job, {}, [&](const auto&) { ++a1; });
  watchers_.Watch(a->job, {}, [&](const auto&) { ++a2; });
  watchers_.Watch(b->job, {}, [&](const auto&) { ++b1; });
  EXPECT_EQ(watchers_.size(), 3u);
  moe::v1::StepMetrics m;
  m.set_step(1);
  ASSERT_TRUE(jobs_.PublishMetrics(*a, m).ok());
  ASSERT_TRUE(jobs_.Event(*a, "Note", "").ok());
  EXPECT_EQ(a1, 3);  // snapshot, metrics, event
  EXPECT_EQ(a2, 3);
  EXPECT_EQ(b1, 1) << "job a's messages are not job b's stream's";
  watchers_.Unwatch(s1);
  watchers_.Unwatch(s1);  // twice: nothing more
  EXPECT_EQ(watchers_.size(), 2u);
  ASSERT_TRUE(jobs_.PublishMetrics(*a, m).ok());
  EXPECT_EQ(a1, 3);
  EXPECT_EQ(a2, 4);
  ASSERT_TRUE(jobs_.Transition(*a, moe::v1::CANCELLED, "Cancelled", "").ok());
  EXPECT_EQ(a2, 6);  // the event, then the final snapshot
  EXPECT_EQ(watchers_.size(), 1u) << "job a's streams ended with it; job b's stays";
  ASSERT_TRUE(jobs_.PublishMetrics(*b, m).ok());
  EXPECT_EQ(b1, 2);
}

// The checkpoint keys with the root cached give what ResolvedCheckpointDir gives, symbolic links
// included, and see the root's link changed within a second.
TEST(CheckpointKeys, AsResolvedCheckpointDirWithTheRootCached) {
  char tmpl[] = "/tmp/ckeys-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string tmp = tmpl, real = tmp + "/real", other = tmp + "/other", link = tmp + "/link";
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{tmp};
  ASSERT_EQ(::mkdir(real.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(other.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  CheckpointKeys keys(link + "/");
  EXPECT_EQ(keys.ResolvedRoot(), real);
  EXPECT_EQ(keys.Key(link + "/job-1"), real + "/job-1") << "a new job's default directory";
  ASSERT_EQ(::symlink(other.c_str(), (real + "/job-2").c_str()), 0);
  EXPECT_EQ(keys.Key(link + "/job-2"), other) << "one that exists is resolved through its link";
  for (const std::string& d : {link + "/a/b", link + "/../link/job-3", std::string("rel/x"),
                               std::string("/"), tmp, link, link + "/job-1/"})
    EXPECT_EQ(keys.Key(d), ResolvedCheckpointDir(d)) << d;
  EXPECT_EQ(CheckpointKeys("").ResolvedRoot(), "");
  EXPECT_EQ(CheckpointKeys("").Key(link + "/job-4"), real + "/job-4");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the cache expired: the next
  const auto resolved = std::chrono::steady_clock::now();        // call resolves from here
  EXPECT_EQ(keys.ResolvedRoot(), real);
  ASSERT_EQ(::unlink(link.c_str()), 0);
  ASSERT_EQ(::symlink(other.c_str(), link.c_str()), 0);
  const std::string cached = keys.Key(link + "/job-6");
  if (std::chrono::steady_clock::now() - resolved < std::chrono::milliseconds(900)) {
    EXPECT_EQ(cached, real + "/job-6") << "within the second: the cached root (no walk)";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(keys.Key(link + "/job-5"), other + "/job-5") << "the root resolved again";
  EXPECT_EQ(keys.ResolvedRoot(), other);
}

// The memory a rank needs, as placement compares it with a worker's: never negative, never wrapped.
TEST(RankMemory, BytesSaturateInsteadOfWrapping) {
  EXPECT_EQ(SaturatingBytes(0), 0);
  EXPECT_EQ(SaturatingBytes(-5), 0);
  EXPECT_EQ(SaturatingBytes(12.6e9), int64_t{12600000000});
  EXPECT_EQ(SaturatingBytes(9223372036854775808.0), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(SaturatingBytes(3.4e23), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(SaturatingBytes(std::nan("")), std::numeric_limits<int64_t>::max());
}

// An absurd model submitted while no worker was up reaches placement with a need no worker has:
// past 2^63 bytes it came out negative (a double cast to int64) and fitted everywhere.
TEST_F(JobManagerTest, AnAbsurdModelNeedsMoreMemoryThanAnyWorkerHas) {
  JobSpec spec = Spec("absurd");
  spec.model.hidden_size = 1000000;
  auto e = jobs_.Create(jobs_.NewId("absurd"), SpecToProto(spec), spec);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_GT(RankMemoryNeed(**e), int64_t{1} << 40) << "terabytes per rank";
  spec = Spec("overflowing");
  spec.model.hidden_size = 1000000000;  // about 1e18 parameters a layer: past 2^63 bytes
  auto o = jobs_.Create(jobs_.NewId("overflowing"), SpecToProto(spec), spec);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(RankMemoryNeed(**o), std::numeric_limits<int64_t>::max());
  EXPECT_GT(RankMemoryNeed(*NewJob("tiny")), 0);
  EXPECT_LT(RankMemoryNeed(*NewJob("tiny2")), int64_t{1} << 34) << "tiny fits in 16 GiB";
}

}  // namespace
}  // namespace moe::controller
