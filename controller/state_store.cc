#include "controller/state_store.h"

#include <google/protobuf/util/json_util.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/file_util.h"
#include "common/log.h"

namespace moe::controller {
namespace {

sqlite3* Db(void* p) { return static_cast<sqlite3*>(p); }

// A record as it is stored: binary protobuf, a BLOB. Controllers before 2026-12 stored JSON text,
// which Decode still reads; protobuf's JSON printer was most of the writer's time (14 % of the
// controller's in bench/load.py's submits).
StatusOr<std::string> Encode(const google::protobuf::Message& m) {
  std::string out;
  if (!m.SerializeToString(&out)) return InternalError("cannot serialize a " + m.GetTypeName());
  return out;
}

void BindRecord(sqlite3_stmt* s, int column, const std::string& bytes) {
  sqlite3_bind_blob(s, column, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
}

// The record in `column` of the row: binary protobuf (a BLOB), or JSON text of an older controller.
Status Decode(sqlite3_stmt* s, int column, google::protobuf::Message* m) {
  if (sqlite3_column_type(s, column) == SQLITE_BLOB) {
    const void* data = sqlite3_column_blob(s, column);
    if (m->ParseFromArray(data, sqlite3_column_bytes(s, column))) return OkStatus();
    return DataLossError("stored " + m->GetTypeName() + " record does not parse");
  }
  const unsigned char* text = sqlite3_column_text(s, column);
  auto st = google::protobuf::util::JsonStringToMessage(
      text != nullptr ? reinterpret_cast<const char*>(text) : "", m);
  if (!st.ok()) return DataLossError("stored record does not parse: " + std::string(st.message()));
  return OkStatus();
}

// A failed SQLite call as a Status whose code tells the caller what to do: a full disk is
// RESOURCE_EXHAUSTED, a busy or failing disk UNAVAILABLE (a retry may work), the rest INTERNAL.
Status SqliteError(sqlite3* db, const std::string& what) {
  const std::string msg = what + ": " + sqlite3_errmsg(db);
  switch (sqlite3_errcode(db) & 0xff) {
    case SQLITE_FULL:
      return ResourceExhaustedError("state store: " + msg);
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
      return UnavailableError("state store: " + msg);
    default:
      return InternalError("state store: " + msg);
  }
}

}  // namespace

// Prepared statements kept for reuse, by their SQL, on one connection: preparing parses the SQL,
// which was a fifth of a small write's time (bench/load.py's submits: sqlite3_prepare_v2 4 % of the
// controller's CPU). A statement in use is out of the cache, so that two threads never share one.
class StmtCache {
 public:
  explicit StmtCache(void* db) : db_(Db(db)) {}
  ~StmtCache() {
    for (auto& [sql, s] : idle_) sqlite3_finalize(s);
  }
  StmtCache(const StmtCache&) = delete;
  StmtCache& operator=(const StmtCache&) = delete;

  sqlite3* db() const { return db_; }
  // A statement for `sql`, reset with no bindings: the cached one, or a new one (*rc its
  // prepare's).
  sqlite3_stmt* Take(const char* sql, int* rc) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = idle_.find(sql); it != idle_.end()) {
        sqlite3_stmt* s = it->second;
        idle_.erase(it);
        *rc = SQLITE_OK;
        return s;
      }
    }
    sqlite3_stmt* s = nullptr;
    *rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
    return s;
  }
  // Back into the cache, reset (a reset statement holds no read snapshot open) and unbound.
  void Give(const char* sql, sqlite3_stmt* s) {
    if (s == nullptr) return;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.emplace(sql, s).second) sqlite3_finalize(s);  // another thread's copy is kept
  }

 private:
  sqlite3* db_;
  std::mutex mu_;
  std::unordered_map<std::string, sqlite3_stmt*> idle_;
};

// Checkpoints the WAL into the database file on a thread of its own, on a connection of its own.
// SQLite's automatic checkpoint runs inside the COMMIT that takes the WAL past 1,000 pages, so the
// writer, and every change in its batch, waited for the copy and the database file's fsync: up to
// 350 ms on the 2-core machine (bench/load.py's SubmitJob p99). A PASSIVE checkpoint runs beside
// the writer, which goes on appending to the WAL meanwhile.
class WalCheckpointer {
 public:
  WalCheckpointer(sqlite3* writer, sqlite3* own) : writer_(writer), db_(own) {
    thread_ = std::thread([this] { Run(); });  // first: the hook must never outlive a failed start
    sqlite3_wal_hook(writer_, &WalCheckpointer::OnCommit, this);  // replaces the automatic one
  }
  ~WalCheckpointer() {
    sqlite3_wal_hook(writer_, nullptr, nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
    sqlite3_close(db_);
  }
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

 private:
  static constexpr int kPages = 1000;  // SQLite's own threshold
  // Past this the writer checkpoints itself, as SQLite would: a WAL only starts again from its
  // beginning when a checkpoint has caught up with the writer, which writes that never pause
  // (minutes of them) can keep the thread from doing; the WAL stays bounded.
  static constexpr int kWriterPages = 4 * kPages;

  static int OnCommit(void* self, sqlite3* db, const char* name, int pages) {
    if (pages < kPages) return SQLITE_OK;
    if (pages >= kWriterPages) {
      sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
      return SQLITE_OK;
    }
    auto* c = static_cast<WalCheckpointer*>(self);
    {
      std::lock_guard<std::mutex> lock(c->mu_);
      c->wanted_ = true;
    }
    c->cv_.notify_one();
    return SQLITE_OK;
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return wanted_ || stop_; });
      if (stop_) return;
      wanted_ = false;
      lock.unlock();
      int log = 0, done = 0;
      const int rc = sqlite3_wal_checkpoint_v2(db_, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
      if (rc != SQLITE_OK && rc != SQLITE_BUSY)
        MOE_LOG(WARNING) << "state store: WAL checkpoint: " << sqlite3_errmsg(db_);
      lock.lock();
      // At most one every 100 ms: each ends in an fsync of the database file, and the commits that
      // ask for one come hundreds a second under load.
      cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; });
    }
  }

  sqlite3* writer_;
  sqlite3* db_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, stop_ = false;
  std::thread thread_;
};

namespace {

// A prepared statement: one of the connection's cached statements, given back when done, or (with
// a connection) one of its own that finalizes itself.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  Stmt(StmtCache& cache, const char* sql) : db_(cache.db()), cache_(&cache), sql_(sql) {
    s_ = cache.Take(sql, &rc_);
  }
  ~Stmt() {
    if (cache_ != nullptr && rc_ == SQLITE_OK) {
      cache_->Give(sql_, s_);
    } else {
      sqlite3_finalize(s_);
    }
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  Status Error(const std::string& what) const { return SqliteError(db_, what); }

 private:
  sqlite3* db_;
  StmtCache* cache_ = nullptr;
  const char* sql_ = nullptr;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

}  // namespace

StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(const std::string& dir) {
  MOE_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = JoinPath(dir, "controller.db");
  // A file that is there but empty is no state this controller wrote (a truncation, a stray touch):
  // SQLite would take it as a new database and the controller would start with no jobs.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_size == 0) {
    return FailedPreconditionError(
        "state database " + path +
        " is empty (0 bytes): not a state this controller wrote; nothing "
        "was changed: restore it from a backup, or remove it to start afresh");
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return UnavailableError("cannot open state database " + path + ": " + msg);
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::unique_ptr<SqliteStateStore>(new SqliteStateStore(db));
  MOE_RETURN_IF_ERROR(store->CheckIntegrity(path));
  MOE_RETURN_IF_ERROR(store->CheckOurs(path));
  MOE_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  MOE_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  MOE_RETURN_IF_ERROR(
      store->Exec("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, created_at REAL NOT NULL, "
                  "record TEXT NOT NULL)"));
  MOE_RETURN_IF_ERROR(
      store->Exec("CREATE TABLE IF NOT EXISTS events (job_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                  "record TEXT NOT NULL, "
                  "PRIMARY KEY (job_id, seq))"));
  MOE_RETURN_IF_ERROR(
      store->Exec("CREATE TABLE IF NOT EXISTS workers (name TEXT PRIMARY KEY, session TEXT NOT "
                  "NULL, record TEXT NOT NULL)"));
  MOE_RETURN_IF_ERROR(
      store->Exec("CREATE TABLE IF NOT EXISTS node_credentials (sha256 TEXT PRIMARY KEY, node TEXT "
                  "NOT NULL, record TEXT NOT NULL)"));
  MOE_RETURN_IF_ERROR(store->Exec(
      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"));
  MOE_RETURN_IF_ERROR(store->Exec("INSERT OR IGNORE INTO meta (key, value) VALUES ('epoch', 0)"));
  MOE_RETURN_IF_ERROR(store->Exec("PRAGMA application_id=" + std::to_string(kApplicationId)));
  sqlite3* reader = nullptr;
  if (sqlite3_open_v2(path.c_str(), &reader, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = reader ? sqlite3_errmsg(reader) : "out of memory";
    sqlite3_close(reader);
    return UnavailableError("cannot open state database " + path + " for reading: " + msg);
  }
  sqlite3_busy_timeout(reader, 5000);
  store->reader_ = reader;
  store->reads_ = std::make_unique<StmtCache>(reader);
  MOE_RETURN_IF_ERROR(store->StartCheckpointer(path));
  return store;
}

Status SqliteStateStore::StartCheckpointer(const std::string& path) {
  sqlite3* own = nullptr;
  if (sqlite3_open_v2(path.c_str(), &own, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = own ? sqlite3_errmsg(own) : "out of memory";
    sqlite3_close(own);
    return UnavailableError("cannot open state database " + path + " for checkpoints: " + msg);
  }
  sqlite3_busy_timeout(own, 5000);
  // A connection knows the database is in WAL mode once it has read it: until then a checkpoint
  // on it does nothing (its log and checkpointed counts come back -1).
  // And its checkpoints sync the database file as the writer's commits do (FULL, said, not
  // assumed).
  if (sqlite3_exec(own, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL", nullptr, nullptr,
                   nullptr) != SQLITE_OK) {
    const Status st = SqliteError(own, "the checkpoints' connection");
    sqlite3_close(own);
    return st;
  }
  checkpointer_ = std::make_unique<WalCheckpointer>(Db(db_), own);
  return OkStatus();
}

// A database another program wrote (its own tables, or none of ours in a file that has some) is not
// taken over: SQLite's application_id names ours, and a store of an earlier version, from before
// the id, is known by its tables.
Status SqliteStateStore::CheckOurs(const std::string& path) {
  const auto one = [&](const char* sql) -> int64_t {
    Stmt q(Db(db_), sql);
    return q.ok() && sqlite3_step(q.get()) == SQLITE_ROW ? sqlite3_column_int64(q.get(), 0) : -1;
  };
  const int64_t id = one("PRAGMA application_id");
  if (id == kApplicationId) return OkStatus();
  const int64_t tables = one("SELECT count(*) FROM sqlite_master WHERE type = 'table'");
  const int64_t ours =
      one("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('jobs', 'events', "
          "'workers')");
  if (id == 0 && (tables == 0 || ours == 3)) return OkStatus();  // new, or ours before the id
  return FailedPreconditionError(
      "state database " + path + " is not a moe-controller state (application id " +
      std::to_string(id) + ", " + std::to_string(tables) +
      " tables of another program); nothing was changed: point --state-dir at this "
      "controller's own directory");
}

namespace {

StatusOr<int64_t> ReadEpoch(sqlite3* db) {
  Stmt q(db, "SELECT value FROM meta WHERE key = 'epoch'");
  if (!q.ok() || sqlite3_step(q.get()) != SQLITE_ROW) return q.Error("read the epoch");
  return static_cast<int64_t>(sqlite3_column_int64(q.get(), 0));
}

}  // namespace

StatusOr<int64_t> SqliteStateStore::NextEpoch() {
  MOE_RETURN_IF_ERROR(CheckWritable());
  MOE_RETURN_IF_ERROR(Exec("UPDATE meta SET value = value + 1 WHERE key = 'epoch'"));
  return ReadEpoch(Db(db_));  // its own connection: it sees the update in a batch not committed yet
}

StatusOr<int64_t> SqliteStateStore::StoredEpoch() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  return ReadEpoch(Db(reader_));  // what is committed, without waiting for the writer
}

SqliteStateStore::SqliteStateStore(void* db) : db_(db), writes_(std::make_unique<StmtCache>(db)) {}

SqliteStateStore::~SqliteStateStore() {
  checkpointer_.reset();  // off the writer before it closes
  reads_.reset();         // a connection with statements left open does not close
  writes_.reset();
  sqlite3_close(Db(reader_));
  sqlite3_close(Db(db_));
}

// SQLite's own check of the file (pages, indexes, records) before anything reads or writes it: a
// damaged state is an error a person decides about, never a silent reset.
Status SqliteStateStore::CheckIntegrity(const std::string& path) {
  Stmt q(Db(db_), "PRAGMA quick_check");
  std::string verdict;
  int rc = q.ok() ? sqlite3_step(q.get()) : SQLITE_ERROR;
  if (rc == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(q.get(), 0);
    verdict = text != nullptr ? reinterpret_cast<const char*>(text) : "";
  } else {
    verdict = sqlite3_errmsg(Db(db_));
  }
  if (verdict == "ok") return OkStatus();
  return DataLossError("state database " + path + " fails SQLite's integrity check (" + verdict +
                       "); nothing was changed: restore it from a backup, or move it aside to "
                       "start with an empty state");
}

Status SqliteStateStore::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(Db(db_), sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    sqlite3_free(err);
    return SqliteError(Db(db_), "sqlite: " + sql);
  }
  return OkStatus();
}

Status SqliteStateStore::Step(const char* sql) {
  Stmt s(*writes_, sql);
  if (!s.ok() || sqlite3_step(s.get()) != SQLITE_DONE)
    return s.Error("sqlite: " + std::string(sql));
  return OkStatus();
}

Status SqliteStateStore::CheckWritable() {
  static const char* flag = std::getenv("MOE_TEST_STORE_FULL_IF");
  if (flag != nullptr && *flag != '\0' && PathExists(flag)) {
    return ResourceExhaustedError(
        "state store: database or disk is full (test hook: " + std::string(flag) + " exists)");
  }
  return OkStatus();
}

Status SqliteStateStore::PutJob(const moe::v1::Job& job) {
  MOE_RETURN_IF_ERROR(CheckWritable());
  moe::v1::Job copy = job;
  copy.clear_events();
  MOE_ASSIGN_OR_RETURN(const std::string record, Encode(copy));
  Stmt s(*writes_, "INSERT OR REPLACE INTO jobs (id, created_at, record) VALUES (?, ?, ?)");
  if (!s.ok()) return s.Error("prepare");
  sqlite3_bind_text(s.get(), 1, job.id().c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(s.get(), 2, job.created_at());
  BindRecord(s.get(), 3, record);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return s.Error("store job " + job.id());
  return OkStatus();
}

Status SqliteStateStore::AppendEvent(const moe::v1::JobEvent& event) {
  MOE_RETURN_IF_ERROR(CheckWritable());
  MOE_ASSIGN_OR_RETURN(const std::string record, Encode(event));
  Stmt s(*writes_, "INSERT OR REPLACE INTO events (job_id, seq, record) VALUES (?, ?, ?)");
  if (!s.ok()) return s.Error("prepare");
  sqlite3_bind_text(s.get(), 1, event.job_id().c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s.get(), 2, event.seq());
  BindRecord(s.get(), 3, record);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return s.Error("store event of " + event.job_id());
  return OkStatus();
}

Status SqliteStateStore::Transaction(const std::function<Status()>& body) {
  if (in_batch_) return body();  // the batch's transaction holds it
  MOE_RETURN_IF_ERROR(Step("BEGIN IMMEDIATE"));
  Status st = body();
  if (st.ok()) st = Step("COMMIT");
  // Nothing of it may stay. SQLite has already rolled back after some errors (autocommit is on
  // again).
  if (!st.ok() && sqlite3_get_autocommit(Db(db_)) == 0) {
    if (Status rb = Step("ROLLBACK"); !rb.ok())
      MOE_LOG(ERROR) << "rolling back a failed write: " << rb;
  }
  return st;
}

Status SqliteStateStore::Batch(const std::function<Status()>& writes) {
  MOE_RETURN_IF_ERROR(CheckWritable());
  const Status st = Transaction([&] {
    in_batch_ = true;
    const Status inner = writes();
    in_batch_ = false;
    return inner;
  });
  in_batch_ = false;
  return st;
}

Status SqliteStateStore::PutJobWithEvent(const moe::v1::Job& job, const moe::v1::JobEvent& event) {
  return Transaction([&]() -> Status {
    MOE_RETURN_IF_ERROR(PutJob(job));
    return AppendEvent(event);
  });
}

Status SqliteStateStore::DeleteJob(const std::string& job_id) {
  MOE_RETURN_IF_ERROR(CheckWritable());
  return Transaction([&]() -> Status {
    for (const char* sql :
         {"DELETE FROM events WHERE job_id = ?", "DELETE FROM jobs WHERE id = ?"}) {
      Stmt s(*writes_, sql);
      if (!s.ok()) return s.Error("prepare");
      sqlite3_bind_text(s.get(), 1, job_id.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(s.get()) != SQLITE_DONE) return s.Error("delete job " + job_id);
    }
    return OkStatus();
  });
}

Status SqliteStateStore::PutWorker(const moe::v1::Worker& info, const std::string& session) {
  MOE_RETURN_IF_ERROR(CheckWritable());
  MOE_ASSIGN_OR_RETURN(const std::string record, Encode(info));
  Stmt s(*writes_, "INSERT OR REPLACE INTO workers (name, session, record) VALUES (?, ?, ?)");
  if (!s.ok()) return s.Error("prepare");
  sqlite3_bind_text(s.get(), 1, info.name().c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s.get(), 2, session.c_str(), -1, SQLITE_TRANSIENT);
  BindRecord(s.get(), 3, record);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return s.Error("store worker " + info.name());
  return OkStatus();
}

Status SqliteStateStore::DeleteWorker(const std::string& name) {
  MOE_RETURN_IF_ERROR(CheckWritable());
  Stmt s(*writes_, "DELETE FROM workers WHERE name = ?");
  if (!s.ok()) return s.Error("prepare");
  sqlite3_bind_text(s.get(), 1, name.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return s.Error("forget worker " + name);
  return OkStatus();
}

Status SqliteStateStore::PutNodeCredential(const moe::v1::NodeCredential& c) {
  MOE_RETURN_IF_ERROR(CheckWritable());
  MOE_ASSIGN_OR_RETURN(const std::string record, Encode(c));
  Stmt s(*writes_,
         "INSERT OR REPLACE INTO node_credentials (sha256, node, record) VALUES (?, ?, ?)");
  if (!s.ok()) return s.Error("prepare");
  sqlite3_bind_text(s.get(), 1, c.sha256().c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s.get(), 2, c.node().c_str(), -1, SQLITE_TRANSIENT);
  BindRecord(s.get(), 3, record);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return s.Error("store node credential of " + c.node());
  return OkStatus();
}

Status SqliteStateStore::DeleteNodeCredential(const std::string& sha256) {
  MOE_RETURN_IF_ERROR(CheckWritable());
  Stmt s(*writes_, "DELETE FROM node_credentials WHERE sha256 = ?");
  if (!s.ok()) return s.Error("prepare");
  sqlite3_bind_text(s.get(), 1, sha256.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return s.Error("drop a node credential");
  return OkStatus();
}

StatusOr<std::vector<moe::v1::NodeCredential>> SqliteStateStore::LoadNodeCredentials() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt s(Db(reader_), "SELECT record FROM node_credentials ORDER BY node");
  if (!s.ok()) return s.Error("prepare");
  std::vector<moe::v1::NodeCredential> out;
  while (sqlite3_step(s.get()) == SQLITE_ROW) {
    MOE_RETURN_IF_ERROR(Decode(s.get(), 0, &out.emplace_back()));
  }
  return out;
}

StatusOr<std::vector<StoredWorker>> SqliteStateStore::LoadWorkers() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt s(Db(reader_), "SELECT session, record FROM workers ORDER BY name");
  if (!s.ok()) return s.Error("prepare");
  std::vector<StoredWorker> out;
  while (sqlite3_step(s.get()) == SQLITE_ROW) {
    StoredWorker w;
    w.session = reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0));
    MOE_RETURN_IF_ERROR(Decode(s.get(), 1, &w.info));
    out.push_back(std::move(w));
  }
  return out;
}

StatusOr<std::vector<moe::v1::Job>> SqliteStateStore::LoadJobs() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt s(Db(reader_), "SELECT record FROM jobs ORDER BY created_at, id");
  if (!s.ok()) return s.Error("prepare");
  std::vector<moe::v1::Job> jobs;
  while (sqlite3_step(s.get()) == SQLITE_ROW) {
    moe::v1::Job j;
    MOE_RETURN_IF_ERROR(Decode(s.get(), 0, &j));
    jobs.push_back(std::move(j));
  }
  return jobs;
}

StatusOr<std::vector<moe::v1::JobEvent>> SqliteStateStore::LoadEvents(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt s(*reads_, "SELECT record FROM events WHERE job_id = ? ORDER BY seq");
  if (!s.ok()) return s.Error("prepare");
  sqlite3_bind_text(s.get(), 1, job_id.c_str(), -1, SQLITE_TRANSIENT);
  std::vector<moe::v1::JobEvent> events;
  while (sqlite3_step(s.get()) == SQLITE_ROW) {
    moe::v1::JobEvent e;
    MOE_RETURN_IF_ERROR(Decode(s.get(), 0, &e));
    events.push_back(std::move(e));
  }
  return events;
}

Status MemoryStateStore::PutJob(const moe::v1::Job& job) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  for (auto& j : jobs_) {
    if (j.id() == job.id()) {
      j = job;
      j.clear_events();
      return OkStatus();
    }
  }
  jobs_.push_back(job);
  jobs_.back().clear_events();
  return OkStatus();
}
Status MemoryStateStore::AppendEvent(const moe::v1::JobEvent& event) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  events_.push_back(event);
  return OkStatus();
}
Status MemoryStateStore::PutJobWithEvent(const moe::v1::Job& job, const moe::v1::JobEvent& event) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  MOE_RETURN_IF_ERROR(PutJob(job));
  return AppendEvent(event);
}
StatusOr<std::vector<moe::v1::Job>> MemoryStateStore::LoadJobs() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return jobs_;
}
Status MemoryStateStore::DeleteJob(const std::string& job_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::erase_if(jobs_, [&](const moe::v1::Job& j) { return j.id() == job_id; });
  std::erase_if(events_, [&](const moe::v1::JobEvent& e) { return e.job_id() == job_id; });
  return OkStatus();
}
Status MemoryStateStore::PutWorker(const moe::v1::Worker& info, const std::string& session) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  workers_[info.name()] = {info, session};
  return OkStatus();
}
StatusOr<std::vector<StoredWorker>> MemoryStateStore::LoadWorkers() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::vector<StoredWorker> out;
  out.reserve(workers_.size());
  for (const auto& [name, w] : workers_) out.push_back(w);
  return out;
}
Status MemoryStateStore::DeleteWorker(const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  workers_.erase(name);
  return OkStatus();
}
Status MemoryStateStore::PutNodeCredential(const moe::v1::NodeCredential& c) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::erase_if(credentials_,
                [&](const moe::v1::NodeCredential& x) { return x.sha256() == c.sha256(); });
  credentials_.push_back(c);
  return OkStatus();
}
StatusOr<std::vector<moe::v1::NodeCredential>> MemoryStateStore::LoadNodeCredentials() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return credentials_;
}
Status MemoryStateStore::DeleteNodeCredential(const std::string& sha256) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::erase_if(credentials_,
                [&](const moe::v1::NodeCredential& x) { return x.sha256() == sha256; });
  return OkStatus();
}
StatusOr<std::vector<moe::v1::JobEvent>> MemoryStateStore::LoadEvents(const std::string& job_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::vector<moe::v1::JobEvent> out;
  for (const auto& e : events_)
    if (e.job_id() == job_id) out.push_back(e);
  return out;
}

}  // namespace moe::controller
