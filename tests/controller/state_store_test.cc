#include "controller/state_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/file_util.h"

namespace moe::controller {
namespace {

TEST(SqliteStateStore, JobsAndEventsSurviveReopening) {
  const std::string dir = "/tmp/moe-store-test-" + std::to_string(::getpid());
  ASSERT_TRUE(RemoveAll(dir).ok());
  {
    auto store = SqliteStateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    moe::v1::Job j;
    j.set_id("job-1");
    j.set_state(moe::v1::RUNNING);
    j.set_created_at(5);
    j.mutable_spec()->mutable_metadata()->set_name("job");
    j.add_placement()->set_worker("w0");
    ASSERT_TRUE((*store)->PutJob(j).ok());
    j.set_state(moe::v1::SUCCEEDED);  // replaced, not duplicated
    ASSERT_TRUE((*store)->PutJob(j).ok());
    for (int s = 1; s <= 3; ++s) {
      moe::v1::JobEvent e;
      e.set_job_id("job-1");
      e.set_seq(s);
      e.set_type("T" + std::to_string(s));
      ASSERT_TRUE((*store)->AppendEvent(e).ok());
    }
  }
  auto store = SqliteStateStore::Open(dir);
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state(), moe::v1::SUCCEEDED);
  EXPECT_EQ((*jobs)[0].placement(0).worker(), "w0");
  auto events = (*store)->LoadEvents("job-1");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[2].type(), "T3");
  EXPECT_TRUE(PathExists(dir + "/controller.db-wal") || PathExists(dir + "/controller.db"))
      << "WAL mode";
  (void)RemoveAll(dir);
}

TEST(SqliteStateStore, WorkerSessionsAndDeletionsSurviveReopening) {
  const std::string dir = "/tmp/moe-store-test-w-" + std::to_string(::getpid());
  ASSERT_TRUE(RemoveAll(dir).ok());
  {
    auto store = SqliteStateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    moe::v1::Worker w;
    w.set_name("w0");
    w.set_rack("r0");
    ASSERT_TRUE((*store)->PutWorker(w, "session-1").ok());
    w.set_drained(true);
    ASSERT_TRUE((*store)->PutWorker(w, "session-2").ok());  // replaced
    for (const char* id : {"keep", "gone"}) {
      moe::v1::Job j;
      j.set_id(id);
      moe::v1::JobEvent e;
      e.set_job_id(id);
      e.set_seq(1);
      ASSERT_TRUE((*store)->PutJobWithEvent(j, e).ok());
    }
    ASSERT_TRUE((*store)->DeleteJob("gone").ok());
  }
  auto store = SqliteStateStore::Open(dir);
  ASSERT_TRUE(store.ok());
  auto workers = (*store)->LoadWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].session, "session-2");
  EXPECT_TRUE((*workers)[0].info.drained());
  auto jobs = (*store)->LoadJobs();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].id(), "keep");
  EXPECT_TRUE((*store)->LoadEvents("gone")->empty());
  EXPECT_EQ((*store)->LoadEvents("keep")->size(), 1u);
  ASSERT_TRUE(RemoveAll(dir).ok());
}

TEST(SqliteStateStore, UnwritableDirectoryIsAClearError) {
  auto store = SqliteStateStore::Open("/proc/nope/state");
  ASSERT_FALSE(store.ok());
}

TEST(SqliteStateStore, ADamagedDatabaseIsRefusedAtOpenAndLeftAsItWas) {
  const std::string dir = ::testing::TempDir() + "/store-damaged";
  ASSERT_TRUE(RemoveAll(dir).ok());
  {
    auto store = SqliteStateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    moe::v1::Job j;
    j.set_id("kept");
    ASSERT_TRUE((*store)->PutJob(j).ok());
  }
  // Not a database at all: garbage where the header should be.
  const std::string path = dir + "/controller.db";
  for (const char* f : {"/controller.db-wal", "/controller.db-shm"}) std::remove((dir + f).c_str());
  std::string bytes = *ReadFileToString(path);
  std::string garbage(bytes.size(), 'x');
  ASSERT_TRUE(WriteFileAtomic(path, garbage).ok());
  auto store = SqliteStateStore::Open(dir);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status();
  EXPECT_NE(store.status().message().find("fails SQLite's integrity check"), std::string::npos)
      << store.status();
  EXPECT_EQ(*ReadFileToString(path), garbage) << "the damaged file is left for a person to look at";
  ASSERT_TRUE(RemoveAll(dir).ok());
}

// An empty file where the database should be is no state this controller wrote: refused, not
// started as a fresh store with no jobs; so is another program's database. One of ours from before
// the application id (its tables) is taken.
TEST(SqliteStateStore, AnEmptyOrForeignDatabaseIsRefusedAndAnOldOneOfOursIsTaken) {
  const std::string dir = ::testing::TempDir() + "/store-foreign";
  ASSERT_TRUE(RemoveAll(dir).ok());
  ASSERT_TRUE(MakeDirs(dir).ok());
  const std::string path = dir + "/controller.db";
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  auto empty = SqliteStateStore::Open(dir);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(empty.status().message().find("is empty (0 bytes)"), std::string::npos)
      << empty.status();
  std::remove(path.c_str());
  const auto exec = [&](const char* sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  };
  exec("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL)");
  auto foreign = SqliteStateStore::Open(dir);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("is not a moe-controller state"), std::string::npos)
      << foreign.status();
  std::remove(path.c_str());
  exec(
      "CREATE TABLE jobs (id TEXT PRIMARY KEY, created_at REAL NOT NULL, record TEXT NOT NULL);"
      "CREATE TABLE events (job_id TEXT NOT NULL, seq INTEGER NOT NULL, record TEXT NOT NULL, "
      "PRIMARY KEY (job_id, seq));"
      "CREATE TABLE workers (name TEXT PRIMARY KEY, session TEXT NOT NULL, record TEXT NOT NULL);"
      // Records as controllers before 2026-12 wrote them: JSON text (binary protobuf since).
      "INSERT INTO jobs VALUES ('old-1', 1.0, '{\"id\": \"old-1\", \"state\": \"SUCCEEDED\"}');"
      "INSERT INTO events VALUES ('old-1', 1, '{\"job_id\": \"old-1\", \"seq\": 1, "
      "\"type\": \"Submitted\"}');"
      "INSERT INTO workers VALUES ('w0', 's-1', '{\"name\": \"w0\", \"rack\": \"r0\"}')");
  auto old = SqliteStateStore::Open(dir);
  ASSERT_TRUE(old.ok()) << old.status();
  auto jobs = (*old)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state(), moe::v1::SUCCEEDED) << "an older controller's JSON record reads";
  auto events = (*old)->LoadEvents("old-1");
  ASSERT_TRUE(events.ok() && events->size() == 1u);
  EXPECT_EQ((*events)[0].type(), "Submitted");
  auto workers = (*old)->LoadWorkers();
  ASSERT_TRUE(workers.ok() && workers->size() == 1u);
  EXPECT_EQ((*workers)[0].info.rack(), "r0");
  // A new record beside them is binary protobuf, and both read back.
  moe::v1::Job j;
  j.set_id("new-1");
  j.set_state(moe::v1::RUNNING);
  j.set_created_at(2.0);
  ASSERT_TRUE((*old)->PutJob(j).ok());
  jobs = (*old)->LoadJobs();
  ASSERT_TRUE(jobs.ok() && jobs->size() == 2u);
  EXPECT_EQ((*jobs)[1].state(), moe::v1::RUNNING);
  old->reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(
      sqlite3_prepare_v2(db, "SELECT typeof(record) FROM jobs WHERE id = 'new-1'", -1, &q, nullptr),
      SQLITE_OK);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(q, 0)), "blob");
  sqlite3_finalize(q);
  sqlite3_close(db);
  ASSERT_TRUE(RemoveAll(dir).ok());
}

// The fencing epoch grows by one at every start and survives reopening.
TEST(SqliteStateStore, TheFencingEpochGrowsDurably) {
  const std::string dir = ::testing::TempDir() + "/store-epoch";
  ASSERT_TRUE(RemoveAll(dir).ok());
  for (int64_t want = 1; want <= 3; ++want) {
    auto store = SqliteStateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->NextEpoch(), want);
    EXPECT_EQ(*(*store)->StoredEpoch(), want);
  }
  ASSERT_TRUE(RemoveAll(dir).ok());
}

TEST(SqliteStateStore, AJobAndItsEventAreStoredTogetherOrNotAtAll) {
  const std::string dir = "/tmp/moe-store-atomic-test-" + std::to_string(::getpid());
  ASSERT_TRUE(RemoveAll(dir).ok());
  auto store = SqliteStateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  moe::v1::Job j;
  j.set_id("job-1");
  j.set_state(moe::v1::PENDING);
  moe::v1::JobEvent e;
  e.set_job_id("job-1");
  e.set_seq(1);
  e.set_type("Submitted");
  ASSERT_TRUE((*store)->PutJobWithEvent(j, e).ok());
  ASSERT_EQ((*store)->LoadEvents("job-1")->size(), 1u);
  // Break the events table behind the store's back: the event's insert fails after the job's.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/controller.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE events RENAME TO events_gone", nullptr, nullptr, nullptr),
            SQLITE_OK);
  j.set_state(moe::v1::SCHEDULED);
  e.set_seq(2);
  const Status st = (*store)->PutJobWithEvent(j, e);
  EXPECT_FALSE(st.ok());
  ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE events_gone RENAME TO events", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  EXPECT_EQ((*store)->LoadJobs()->at(0).state(), moe::v1::PENDING)
      << "the job's write was rolled back with the event's";
  EXPECT_EQ((*store)->LoadEvents("job-1")->size(), 1u);
  // And the connection is usable again (no transaction left open).
  ASSERT_TRUE((*store)->PutJobWithEvent(j, e).ok());
  EXPECT_EQ((*store)->LoadJobs()->at(0).state(), moe::v1::SCHEDULED);
  EXPECT_EQ((*store)->LoadEvents("job-1")->size(), 2u);
  store->reset();
  EXPECT_TRUE(RemoveAll(dir).ok());
}

// The WAL is checkpointed by the store's own thread, not inside a COMMIT. Writes in bursts with
// pauses between them (as the controller's batches come): once a checkpoint caught up, the next
// write starts the WAL again from its beginning, so the file stops growing after the first burst
// (without checkpoints it holds every burst). Writes that never pause: the writer checkpoints
// itself past 4,000 pages, so the WAL stays bounded. Everything reads back after reopening.
TEST(SqliteStateStore, TheWalIsCheckpointedBesideTheWriter) {
  const std::string dir = "/tmp/moe-store-wal-test-" + std::to_string(::getpid());
  ASSERT_TRUE(RemoveAll(dir).ok());
  const std::string wal = dir + "/controller.db-wal";
  const auto wal_bytes = [&] {
    struct stat st {};
    return ::stat(wal.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  };
  int written = 0;
  {
    auto store = SqliteStateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    moe::v1::Job j;
    j.set_message(std::string(8000, 'x'));  // about 5 pages of WAL a write
    const auto burst = [&](int n) {
      for (int i = 0; i < n; ++i) {
        j.set_id("job-" + std::to_string(written++));
        ASSERT_TRUE((*store)->PutJob(j).ok());
      }
    };
    burst(300);  // past 1,000 pages: the thread is asked for a checkpoint
    const int64_t first = wal_bytes();
    ASSERT_GT(first, 4 << 20);
    for (int round = 0; round < 4; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      burst(300);
      EXPECT_LE(wal_bytes(), first + first / 5) << "burst " << round + 2 << " grew the WAL";
    }
    burst(3000);  // about 60 MB of WAL without a checkpoint
    EXPECT_LT(wal_bytes(), 24 << 20) << "writes without a pause grew the WAL without bound";
  }
  auto store = SqliteStateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  const auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), static_cast<size_t>(written));
  store->reset();
  EXPECT_TRUE(RemoveAll(dir).ok());
}

}  // namespace
}  // namespace moe::controller
