// moectl's commands: one function per command, and the table that binds them to their flags.
#include "cli/commands.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "cli/format.h"
#include "cli/get_watch.h"
#include "cli/jsonpath.h"
#include "cli/object_form.h"
#include "cli/top.h"
#include "cli/watch.h"
#include "common/escape.h"
#include "common/job_spec_proto.h"
#include "common/job_state.h"
#include "common/label_selector.h"

namespace moe::cli {
namespace {

using Stub = moe::v1::JobService::Stub;

std::string NewRequestId() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

// -o json, yaml, jsonpath=TEMPLATE and custom-columns=SPEC print the object form
// (cli/object_form.h); anything else is the table `table` makes. `items` names the list a
// custom-columns row is taken from ("jobs" for get jobs; none: the object is the one row).
StatusOr<std::string> Render(const google::protobuf::Message& m, const std::string& output,
                             const std::function<std::string()>& table, const char* items) {
  if (output == "json") return ToJson(ObjectNode(m), 2) + "\n";
  if (output == "yaml") return ToYaml(ObjectNode(m));
  if (output.starts_with("jsonpath=")) return JsonPath(output.substr(9), ObjectNode(m));
  if (output.starts_with("custom-columns=")) {
    const Node object = ObjectNode(m);
    const Node* list = items != nullptr ? object.Find(items) : nullptr;
    MOE_ASSIGN_OR_RETURN(TableRows t, CustomColumns(output.substr(15), list ? *list : object));
    return Table(t.header, t.rows);
  }
  return table();
}

int Print(const Client& c, const google::protobuf::Message& m, const std::string& output,
          const std::function<std::string()>& table, const char* items = nullptr) {
  StatusOr<std::string> text = Render(m, output, table, items);
  if (!text.ok()) return c.Fail(text.status());
  // Names, paths and messages come from others: no control character reaches the terminal raw (the
  // tables and jsonpath's values escape theirs; JSON and YAML get escapes that read back as the
  // same characters).
  const std::string safe =
      output == "json" || output == "yaml" ? EscapeHiddenAsUnicode(*text) : *text;
  std::printf("%s", safe.c_str());
  return 0;
}

// kubectl's -o name: one kind/name per line, for scripts (moectl get jobs -o name | xargs ...).
int PrintNames(const std::vector<std::string>& names, const std::string& kind) {
  for (const auto& n : names) std::printf("%s/%s\n", kind.c_str(), n.c_str());
  return 0;
}

// `get job ID -o yaml` (or json) is the whole job, its document under `spec`: submitted again,
// the document is what counts and the status is left, as kubectl apply leaves an object's status.
std::string JobDocumentOf(const std::string& text) {
  StatusOr<Node> doc = ParseYaml(text, kJobDocumentLimits);
  if (!doc.ok() || !doc->IsMap() || doc->Find("id") == nullptr) return text;
  const Node* spec = doc->Find("spec");
  if (spec == nullptr || !spec->IsMap() || spec->Find("metadata") == nullptr) return text;
  return ToJson(*spec);
}

int Submit(Client& c, const Args& a) {
  std::stringstream ss;
  if (a.file == "-") {  // the job document on stdin (kubectl's -f -)
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(a.file);
    if (!in) return c.Fail(NotFoundError("-f " + a.file + ": cannot read the file"));
    ss << in.rdbuf();
  }
  // Checked here as the controller will check it (field paths, cross-field rules), and sent as
  // checked.
  auto job = CheckedTrainingJob(JobDocumentOf(ss.str()));
  if (!job.ok()) return c.Fail(job.status().WithPrefix(a.file));
  moe::v1::SubmitJobRequest req;
  *req.mutable_job() = *job;
  // One request id per invocation, kept across its retries: a submit whose answer was lost (a
  // timeout, a dropped connection) and is sent again returns the job the first one created.
  // --resume-by-name: the id is the job's name, so a second submit of that name (a batch script run
  // again after a time limit, with the controller state it left) returns the first job, whatever
  // its state.
  req.set_request_id(a.resume_by_name ? "name:" + job->metadata().name() : NewRequestId());
  moe::v1::Job resp;
  Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    st = c.Call(&Stub::SubmitJob, req, &resp);
    if (st.code() != StatusCode::kUnavailable && st.code() != StatusCode::kDeadlineExceeded) break;
  }
  if (!st.ok()) return c.Fail(st);
  std::printf("%s\n", resp.id().c_str());
  return 0;
}

// Every page of the filtered list, oldest job first.
StatusOr<moe::v1::ListJobsResponse> ListAllJobs(Client& c, const Args& a) {
  moe::v1::ListJobsRequest req;
  for (const auto& s : a.states) {
    moe::v1::JobState state;
    if (!moe::v1::JobState_Parse(s, &state))
      return InvalidArgumentError("--state: unknown state '" + s + "'");
    req.add_states(state);
  }
  req.set_name_prefix(a.name_prefix);
  // Checked here too, so that a typo is named as the flag the user typed; the controller filters.
  MOE_RETURN_IF_ERROR(LabelSelector::Parse(a.selector, "--selector").status());
  req.set_label_selector(a.selector);
  // The tables and names need the basic view (the controller's default); the object forms (json,
  // yaml, jsonpath=, custom-columns=) print or pick any field, so they get the jobs whole.
  if (a.output != "table" && a.output != "wide" && a.output != "name")
    req.set_view(moe::v1::JOB_VIEW_FULL);
  moe::v1::ListJobsResponse all;
  do {
    moe::v1::ListJobsResponse page;
    MOE_RETURN_IF_ERROR(c.Call(&Stub::ListJobs, req, &page));
    for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  return all;
}

// A job as people name it: its id, or its metadata.name when no job has that id (kubectl's habit
// of names), fetched with GetJob. A name several jobs carry is refused with their ids.
StatusOr<moe::v1::Job> ResolveJob(Client& c, const std::string& ref) {
  moe::v1::GetJobRequest req;
  req.set_id(ref);
  moe::v1::Job job;
  const Status st = c.Call(&Stub::GetJob, req, &job);
  if (st.code() != StatusCode::kNotFound) return st.ok() ? StatusOr<moe::v1::Job>(job) : st;
  MOE_ASSIGN_OR_RETURN(moe::v1::ListJobsResponse all, ListAllJobs(c, Args{}));
  std::vector<moe::v1::Job*> named;
  for (auto& j : *all.mutable_jobs()) {
    if (j.spec().metadata().name() == ref) named.push_back(&j);
  }
  if (named.size() == 1) {  // as GetJob shows it (its waiting reason and advice are GetJob's)
    req.set_id(named.front()->id());
    MOE_RETURN_IF_ERROR(c.Call(&Stub::GetJob, req, &job));
    return job;
  }
  if (named.empty())
    return NotFoundError("no job with the id or name '" + ref + "' (moectl get jobs lists them)");
  std::string list;
  for (const auto* j : named) list += (list.empty() ? "" : ", ") + j->id();
  return FailedPreconditionError("the name '" + ref + "' names " + std::to_string(named.size()) +
                                 " jobs (" + list + "): give an id");
}

int GetJob(Client& c, const Args& a, bool describe);

int GetJobs(Client& c, const Args& a) {
  if (!a.ids.empty()) return GetJob(c, a, false);  // get jobs A B: as get job A B
  if (a.watch_list) {
    return WatchTable(
        [&]() -> StatusOr<TableRows> {
          MOE_ASSIGN_OR_RETURN(const moe::v1::ListJobsResponse all, ListAllJobs(c, a));
          return JobRows({all.jobs().begin(), all.jobs().end()}, NowSeconds(), a.output == "wide");
        },
        {"STATE", "RESTARTS", "PRIORITY", "ATTEMPT"}, a.refresh, a.reconnect_seconds,
        [&](const Status& st) { return c.Fail(st); });
  }
  StatusOr<moe::v1::ListJobsResponse> listed = ListAllJobs(c, a);
  if (!listed.ok()) return c.Fail(listed.status());
  const moe::v1::ListJobsResponse& all = *listed;
  if (a.output == "name") {
    std::vector<std::string> names;
    for (const auto& j : all.jobs()) names.push_back(j.id());
    return PrintNames(names, "job");
  }
  return Print(
      c, all, a.output,
      [&] {
        return JobsTable({all.jobs().begin(), all.jobs().end()}, NowSeconds(), a.output == "wide");
      },
      "jobs");
}

// The jobs a cancel or delete acts on: those named (ids or names) and those -l, --state and --name
// select (scancel's -n and -t). A selection takes the jobs that can take the verb: cancel the ones
// not ended, delete the ended ones, unless --state says which.
// A name that finds no job is named on stderr (*rc set) and the others still go ahead; a job named
// twice (or named and selected) is acted on once.
StatusOr<std::vector<std::string>> SelectJobs(Client& c, const Args& a, bool ended, int* rc) {
  std::vector<std::string> ids;
  std::set<std::string> seen;
  const auto add = [&](const std::string& id) {
    if (seen.insert(id).second) ids.push_back(id);
  };
  for (const auto& ref : a.ids) {
    StatusOr<moe::v1::Job> j = ResolveJob(c, ref);
    if (j.ok()) {
      add(j->id());
      continue;
    }
    const int failed = c.Fail(j.status());
    *rc = *rc != 0 ? *rc : failed;
  }
  const bool select = !a.selector.empty() || !a.states.empty() || !a.job_name.empty();
  if (!select && a.ids.empty()) {
    return InvalidArgumentError(
        "give job ids or names, or select jobs with -l SELECTOR, --state STATE or --name NAME");
  }
  if (!select) return ids;
  MOE_ASSIGN_OR_RETURN(const moe::v1::ListJobsResponse all, ListAllJobs(c, a));
  size_t matched = 0;
  for (const auto& j : all.jobs()) {
    if (!a.job_name.empty() && j.spec().metadata().name() != a.job_name) continue;
    if (a.states.empty() && IsTerminal(j.state()) != ended) continue;
    add(j.id());
    ++matched;
  }
  if (matched == 0) std::fprintf(stderr, "moectl: no job matches the selection\n");
  return ids;
}

int DeleteJob(Client& c, const Args& a) {
  int rc = 0;
  StatusOr<std::vector<std::string>> ids = SelectJobs(c, a, /*ended=*/true, &rc);
  if (!ids.ok()) return c.Fail(ids.status());
  for (const auto& id : *ids) {
    moe::v1::DeleteJobRequest req;
    req.set_id(id);
    moe::v1::DeleteJobResponse resp;
    if (Status st = c.Call(&Stub::DeleteJob, req, &resp); !st.ok()) {
      const int failed = c.Fail(st);
      rc = rc != 0 ? rc : failed;
      continue;
    }
    std::printf("%s deleted\n", id.c_str());
  }
  return rc;
}

int DeleteWorker(Client& c, const Args& a) {
  moe::v1::DrainWorkerRequest req;
  req.set_name(a.name);
  moe::v1::DeleteWorkerResponse resp;
  if (Status st = c.Call(&Stub::DeleteWorker, req, &resp); !st.ok()) return c.Fail(st);
  std::printf("%s deleted\n", a.name.c_str());
  return 0;
}

// `delete node N` and `delete workers --state lost`: what went, in one line (`get workers` shows
// what is left).
int PrintDeleted(const moe::v1::DeleteWorkersResponse& resp, const std::string& what) {
  std::printf("%s: %lld worker(s) forgotten%s\n", what.c_str(),
              static_cast<long long>(resp.count()),
              resp.credential_revoked() ? ", its node credential revoked" : "");
  return 0;
}

int DeleteNode(Client& c, const Args& a) {
  moe::v1::DeleteNodeRequest req;
  req.set_node(a.name);
  moe::v1::DeleteWorkersResponse resp;
  if (Status st = c.Call(&Stub::DeleteNode, req, &resp); !st.ok()) return c.Fail(st);
  return PrintDeleted(resp, "node " + a.name + " deleted");
}

int DeleteWorkers(Client& c, const Args& a) {
  if (a.states.size() != 1 || (a.states[0] != "lost" && a.states[0] != "LOST")) {
    std::fprintf(stderr,
                 "moectl delete workers: --state: only 'lost' (a live worker leaves when its "
                 "moe-worker stops)\n");
    return 2;
  }
  moe::v1::DeleteWorkersRequest req;
  req.set_state(moe::v1::LOST);
  moe::v1::DeleteWorkersResponse resp;
  if (Status st = c.Call(&Stub::DeleteWorkers, req, &resp); !st.ok()) return c.Fail(st);
  return PrintDeleted(resp, "lost workers deleted");
}

// The events after `after` (by seq): a table (its header only when `header`), or one JSON object
// a line (-o json with -w), or the whole list as an object (-o json, -o yaml).
void PrintEvents(const moe::v1::Job& job, int64_t after, const Args& a, bool header) {
  moe::v1::Job fresh;
  fresh.set_id(job.id());
  for (const auto& e : job.events()) {
    if (e.seq() > after) *fresh.add_events() = e;
  }
  if (a.output == "json" && a.watch_list) {
    for (const auto& e : fresh.events())
      std::printf("%s\n", EscapeHiddenAsUnicode(ToJson(ObjectNode(e))).c_str());
  } else if (a.output == "json" || a.output == "yaml") {
    Node list = Node::List();
    for (const auto& e : fresh.events()) list.Append(ObjectNode(e));
    Node doc = Node::Map();
    doc.Set("job_id", Node::Scalar(job.id(), true));
    doc.Set("events", std::move(list));
    const std::string text = a.output == "json" ? ToJson(doc, 2) + "\n" : ToYaml(doc);
    std::printf("%s", EscapeHiddenAsUnicode(text).c_str());
  } else if (!fresh.events().empty() || header) {
    const std::string table = EventsTable(fresh, NowSeconds());
    std::printf("%s", header ? table.c_str() : table.substr(table.find('\n') + 1).c_str());
  }
  std::fflush(stdout);
}

// events ID [-w] [-o json|yaml]: -w keeps printing the job's new events until it has ended.
int Events(Client& c, const Args& a) {
  if (a.watch_list && a.output == "yaml")
    return c.Fail(InvalidArgumentError("events -w: -o table or json (json: one event a line)"));
  StatusOr<moe::v1::Job> job = ResolveJob(c, a.id);
  if (!job.ok()) return c.Fail(job.status());
  int64_t last = 0;
  Reconnect again(a.reconnect_seconds);
  for (bool first = true;; first = false) {
    PrintEvents(*job, last, a, first);
    for (const auto& e : job->events()) last = std::max(last, e.seq());
    if (!a.watch_list || IsTerminal(job->state())) return 0;
    moe::v1::GetJobRequest req;
    req.set_id(job->id());
    Status st;
    do {
      std::this_thread::sleep_for(std::chrono::duration<double>(a.refresh));
      st = c.Call(&Stub::GetJob, req, &*job);
    } while (!st.ok() && again.Retry(st));
    if (!st.ok()) return c.Fail(st);
    again.Reached();
  }
}

// Every worker, page after page (ListWorkers answers a page at a time).
Status AllWorkers(Client& c, moe::v1::ListWorkersResponse* out) {
  out->Clear();
  moe::v1::ListWorkersRequest req;
  do {
    moe::v1::ListWorkersResponse page;
    MOE_RETURN_IF_ERROR(c.Call(&Stub::ListWorkers, req, &page));
    for (auto& w : *page.mutable_workers()) *out->add_workers() = std::move(w);
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  return OkStatus();
}

int DescribeWorkerCmd(Client& c, const Args& a) {
  moe::v1::ListWorkersResponse resp;
  if (Status st = AllWorkers(c, &resp); !st.ok()) return c.Fail(st);
  for (const auto& w : resp.workers()) {
    if (w.name() == a.name) {
      std::printf("%s", DescribeWorker(w, NowSeconds()).c_str());
      return 0;
    }
  }
  return c.Fail(NotFoundError("no worker named '" + a.name + "' (moectl get workers lists them)"));
}

// get job A B, describe job A B: each id or name resolved once; one that is not found is named on
// stderr (exit 3) and the others still print, as kubectl does.
int GetJob(Client& c, const Args& a, bool describe) {
  std::vector<moe::v1::Job> jobs;
  int rc = 0;
  for (const auto& ref : a.ids) {
    StatusOr<moe::v1::Job> got = ResolveJob(c, ref);
    if (got.ok())
      jobs.push_back(*std::move(got));
    else
      rc = c.Fail(got.status());
  }
  if (describe) {
    for (size_t i = 0; i < jobs.size(); ++i)
      std::printf("%s%s", i > 0 ? "\n" : "", Describe(jobs[i], NowSeconds()).c_str());
    return rc;
  }
  if (jobs.empty()) return rc;
  if (a.output == "name") {
    std::vector<std::string> names;
    for (const auto& j : jobs) names.push_back(j.id());
    return std::max(rc, PrintNames(names, "job"));
  }
  const auto table = [&] { return JobsTable(jobs, NowSeconds(), a.output == "wide"); };
  if (jobs.size() == 1) return std::max(rc, Print(c, jobs[0], a.output, table));
  moe::v1::ListJobsResponse list;  // several: the form get jobs prints
  for (const auto& j : jobs) *list.add_jobs() = j;
  return std::max(rc, Print(c, list, a.output, table, "jobs"));
}

// get worker A B (or get workers A B): those workers; one that is not there is named on stderr
// (exit 3) and the others still print.
int GetNamedWorkers(Client& c, const Args& a) {
  moe::v1::ListWorkersResponse all, named;
  if (Status st = AllWorkers(c, &all); !st.ok()) return c.Fail(st);
  int rc = 0;
  for (const auto& n : a.ids) {
    const auto it = std::find_if(all.workers().begin(), all.workers().end(),
                                 [&](const moe::v1::Worker& w) { return w.name() == n; });
    if (it != all.workers().end())
      *named.add_workers() = *it;
    else
      rc = c.Fail(NotFoundError("no worker named '" + n + "' (moectl get workers lists them)"));
  }
  if (named.workers().empty()) return rc;
  if (a.output == "name") {
    for (const auto& w : named.workers()) std::printf("worker/%s\n", w.name().c_str());
    return rc;
  }
  const auto table = [&] {
    return WorkersTable({named.workers().begin(), named.workers().end()}, NowSeconds(),
                        a.output == "wide");
  };
  if (named.workers_size() == 1) return std::max(rc, Print(c, named.workers(0), a.output, table));
  return std::max(rc, Print(c, named, a.output, table, "workers"));
}

int GetWorkers(Client& c, const Args& a) {
  if (!a.ids.empty()) return GetNamedWorkers(c, a);
  if (a.watch_list) {
    return WatchTable(
        [&]() -> StatusOr<TableRows> {
          moe::v1::ListWorkersResponse resp;
          MOE_RETURN_IF_ERROR(AllWorkers(c, &resp));
          return WorkerRows({resp.workers().begin(), resp.workers().end()}, NowSeconds(),
                            a.output == "wide");
        },
        {"STATE", "RACK", "RUNS"}, a.refresh, a.reconnect_seconds,
        [&](const Status& st) { return c.Fail(st); });
  }
  moe::v1::ListWorkersResponse resp;
  if (Status st = AllWorkers(c, &resp); !st.ok()) return c.Fail(st);
  if (a.output == "name") {
    std::vector<std::string> names;
    for (const auto& w : resp.workers()) names.push_back(w.name());
    return PrintNames(names, "worker");
  }
  return Print(
      c, resp, a.output,
      [&] {
        return WorkersTable({resp.workers().begin(), resp.workers().end()}, NowSeconds(),
                            a.output == "wide");
      },
      "workers");
}

int GetQueues(Client& c, const Args& a) {
  moe::v1::ListQueuesResponse resp;
  if (Status st = c.Call(&Stub::ListQueues, moe::v1::ListQueuesRequest(), &resp); !st.ok())
    return c.Fail(st);
  if (a.output == "name") {
    std::vector<std::string> names;
    for (const auto& q : resp.queues()) names.push_back(q.name());
    return PrintNames(names, "queue");
  }
  return Print(
      c, resp, a.output,
      [&] {
        return QueuesTable({resp.queues().begin(), resp.queues().end()});
      },
      "queues");
}

int GetRacks(Client& c, const Args& a) {
  moe::v1::ListRacksResponse resp;
  if (Status st = c.Call(&Stub::ListRacks, moe::v1::ListRacksRequest(), &resp); !st.ok())
    return c.Fail(st);
  if (a.output == "name") {
    std::vector<std::string> names;
    for (const auto& r : resp.racks()) names.push_back(r.name());
    return PrintNames(names, "rack");
  }
  return Print(
      c, resp, a.output,
      [&] {
        return RacksTable({resp.racks().begin(), resp.racks().end()});
      },
      "racks");
}

// cancel A B, cancel -l team=x, cancel --state PENDING, cancel --name NAME: every job is tried; the
// exit status is the first failure's.
int Cancel(Client& c, const Args& a) {
  int rc = 0;
  StatusOr<std::vector<std::string>> ids = SelectJobs(c, a, /*ended=*/false, &rc);
  if (!ids.ok()) return c.Fail(ids.status());
  for (const auto& id : *ids) {
    moe::v1::CancelJobRequest req;
    req.set_id(id);
    req.set_now(a.now);
    moe::v1::Job resp;
    if (Status st = c.Call(&Stub::CancelJob, req, &resp); !st.ok()) {
      const int failed = c.Fail(st);
      rc = rc != 0 ? rc : failed;
      continue;
    }
    std::printf("%s %s\n", resp.id().c_str(), StateName(resp.state()).c_str());
  }
  return rc;
}

// drain --wait also moves the worker's rank off it (a checkpoint at its next step, the job
// continues elsewhere without using a restart) and returns once the worker runs nothing.
int Drain(Client& c, const Args& a, bool drain) {
  moe::v1::DrainWorkerRequest req;
  req.set_name(a.name);
  req.set_move_work(drain && a.wait);
  moe::v1::Worker resp;
  if (Status st = c.Call(drain ? &Stub::DrainWorker : &Stub::UndrainWorker, req, &resp); !st.ok())
    return c.Fail(st);
  const bool draining = resp.drained() && resp.state() == moe::v1::BUSY;
  std::printf("%s %s\n", resp.name().c_str(),
              draining ? "DRAINING" : WorkerStateName(resp.state()).c_str());
  if (!drain || !a.wait) return 0;
  return WaitUntilFree(
      a.name,
      [&]() -> StatusOr<std::string> {
        moe::v1::ListWorkersResponse all;
        MOE_RETURN_IF_ERROR(AllWorkers(c, &all));
        for (const auto& w : all.workers()) {
          if (w.name() == a.name) return w.job_id();
        }
        return NotFoundError("worker " + a.name + " is gone (it left or was removed)");
      },
      a.wait_seconds, [&](const Status& st) { return c.Fail(st); });
}

int StepDown(Client& c) {
  moe::v1::StepDownResponse resp;
  if (Status st = c.Call(&Stub::StepDown, moe::v1::StepDownRequest(), &resp); !st.ok())
    return c.Fail(st);
  std::printf("%s stepped down: a standby takes over within a few seconds\n",
              CurrentAddress(c.options).c_str());
  return 0;
}

// watch and logs take a job's id or its name.
int WatchByRef(Client& c, const Args& a) {
  StatusOr<moe::v1::Job> job = ResolveJob(c, a.id);
  if (!job.ok()) return c.Fail(job.status());
  return Watch(c, job->id(), a.watch_output == "json", a.reconnect_seconds);
}

int LogsByRef(Client& c, const Args& a) {
  StatusOr<moe::v1::Job> job = ResolveJob(c, a.logs.id);
  if (!job.ok()) return c.Fail(job.status());
  LogsArgs logs = a.logs;
  logs.id = job->id();
  return Logs(c, logs);
}

int RunTop(Client& c, const Args& a) {
  auto fetch = [&](moe::v1::ListJobsResponse* jobs,
                   moe::v1::ListWorkersResponse* workers) -> Status {
    moe::v1::ListJobsRequest req;
    req.add_states(moe::v1::RUNNING);
    req.add_states(moe::v1::SCHEDULED);
    req.add_states(moe::v1::RESTARTING);
    req.add_states(moe::v1::PREEMPTED);
    req.add_states(moe::v1::STOPPING);
    MOE_RETURN_IF_ERROR(c.Call(&Stub::ListJobs, req, jobs));
    return AllWorkers(c, workers);
  };
  return Top(fetch, a.refresh, a.once, [&](const Status& st) { return c.Fail(st); });
}

}  // namespace

void AddConnectionFlags(CLI::App& app, Client* c, std::string* token_file) {
  // The defaults come from the config file and the environment (LoadConnectionDefaults).
  app.add_option("--controller", c->options.address,
                 "controller address host:port ($MOE_CONTROLLER; config: controller); several, "
                 "comma-separated, for a leader and its standbys: a call goes to the next when one "
                 "refuses as a standby or cannot be reached")
      ->capture_default_str();
  app.add_option("--token", c->options.token,
                 "bearer token ($MOE_TOKEN; visible in ps: prefer --token-file)");
  app.add_option("--token-file", *token_file,
                 "file holding the bearer token, mode 0600 ($MOE_TOKEN_FILE; config: token_file)");
  app.add_option("--tls-ca", c->options.tls_ca,
                 "CA of the controller's certificate (PEM): TLS ($MOE_TLS_CA; config: tls_ca)");
  app.add_option("--tls-cert", c->options.tls_cert,
                 "client certificate (PEM) for mTLS ($MOE_TLS_CERT; config: tls_cert)");
  app.add_option("--tls-key", c->options.tls_key,
                 "client key (PEM) for mTLS ($MOE_TLS_KEY; config: tls_key)");
  app.add_option("--timeout", c->timeout, "deadline of each call, seconds (config: timeout)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

namespace {

// -o: a table, or the object form (json, yaml, jsonpath=, custom-columns=), or kind/name.
void AddOutput(CLI::App* sub, Args* a) {
  sub->add_option("-o,--output", a->output,
                  "table | wide | json | yaml | name | jsonpath=TEMPLATE | "
                  "custom-columns=NAME:PATH,... (docs/operations.md, \"Machine output\")")
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            for (const char* plain : {"table", "wide", "json", "yaml", "name"})
              if (v == plain) return "";
            if (v.starts_with("jsonpath=") || v.starts_with("custom-columns=")) return "";
            return "'" + v +
                   "' is none of table, wide, json, yaml, name, jsonpath=TEMPLATE, "
                   "custom-columns=SPEC";
          },
          "FORMAT"))
      ->capture_default_str();
}

// What cancel and delete job select besides the ids they are given.
void AddSelection(CLI::App* sub, Args* a) {
  sub->add_option("ids", a->ids, "job ids or names (several may be given)");
  sub->add_option("-l,--selector", a->selector,
                  "also every job whose metadata.labels match (team=research,tier!=low)");
  sub->add_option("--state", a->states,
                  "also every job in these states (default with -l or --name: the jobs this verb "
                  "applies to)");
  sub->add_option("--name", a->job_name, "also every job of this metadata.name");
}

// A watch outlives a controller restart: it waits this long for the controller to come back.
void AddReconnectFlag(CLI::App* sub, Args* a) {
  sub->add_option("--reconnect-seconds", a->reconnect_seconds,
                  "a watch that loses the controller reconnects for this long, then fails")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

// kubectl's get -w.
void AddWatchFlags(CLI::App* sub, Args* a) {
  sub->add_flag("-w,--watch", a->watch_list,
                "print the table, then a row each time one changes (until Ctrl-C)");
  sub->add_option("--interval", a->refresh, "-w: seconds between polls")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  AddReconnectFlag(sub, a);
}

std::vector<Command> AddGetAndDescribe(CLI::App& app, Client& c, Args* a) {
  auto* get = app.add_subcommand("get", "list jobs, workers, queues or racks, or show one job");
  get->require_subcommand(1);
  auto* jobs = get->add_subcommand("jobs", "all jobs (every page), oldest first");
  jobs->add_option("--state", a->states, "only jobs in these states (PENDING, RUNNING, ...)");
  jobs->add_option("--prefix", a->name_prefix, "only jobs whose id starts with this");
  jobs->add_option(
      "-l,--selector", a->selector,
      "only jobs whose metadata.labels match: team=research,tier!=low,spot,!preemptible");
  auto* job = get->add_subcommand("job", "one job, or several");
  job->add_option("ids", a->ids, "job ids or names")->required();
  jobs->add_option("ids", a->ids, "only these jobs (ids or names): as get job");
  auto* workers = get->add_subcommand("workers", "all workers, or those named");
  workers->add_option("names", a->ids, "only these workers");
  auto* worker = get->add_subcommand("worker", "one worker, or several");
  worker->add_option("names", a->ids, "worker names")->required();
  auto* queues = get->add_subcommand(
      "queues", "the queues: quota, usage, borrowing, pending and admitted jobs");
  auto* racks = get->add_subcommand(
      "racks", "the racks (NVLink domains): workers by state, spares held back and in use");
  for (auto* sub : {jobs, job, workers, worker, queues, racks}) AddOutput(sub, a);
  for (auto* sub : {jobs, workers}) AddWatchFlags(sub, a);
  auto* describe =
      app.add_subcommand("describe", "a job (spec, placement, events, last metrics) or a worker");
  describe->require_subcommand(1);
  auto* describe_job = describe->add_subcommand("job", "one job, or several");
  describe_job->add_option("ids", a->ids, "job ids or names")->required();
  auto* describe_worker =
      describe->add_subcommand("worker", "one worker: state, rack, device, memory, what it runs");
  describe_worker->add_option("name", a->name, "worker name")->required();
  auto* events = app.add_subcommand("events", "a job's events, oldest first");
  events->add_option("id", a->id, "job id or name")->required();
  events->add_option("-o,--output", a->output, "table | json | yaml (-w -o json: one a line)")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();
  AddWatchFlags(events, a);
  return {{jobs, [&c, a] { return GetJobs(c, *a); }},
          {describe_worker, [&c, a] { return DescribeWorkerCmd(c, *a); }},
          {events, [&c, a] { return Events(c, *a); }},
          {job, [&c, a] { return GetJob(c, *a, false); }},
          {workers, [&c, a] { return GetWorkers(c, *a); }},
          {worker, [&c, a] { return GetNamedWorkers(c, *a); }},
          {queues, [&c, a] { return GetQueues(c, *a); }},
          {racks, [&c, a] { return GetRacks(c, *a); }},
          {describe_job, [&c, a] { return GetJob(c, *a, true); }}};
}

}  // namespace

std::vector<Command> AddCommands(CLI::App& app, Client& c, Args* a) {
  std::vector<Command> out = AddGetAndDescribe(app, c, a);
  auto* submit = app.add_subcommand("submit", "submit a job file; prints the job's id");
  submit->add_option("-f,--file", a->file, "job file (YAML or JSON); - reads it from stdin")
      ->required();
  submit->add_flag(
      "--resume-by-name", a->resume_by_name,
      "if a job of this metadata.name was submitted with this flag before, print its id instead of "
      "submitting another (it resumes from its checkpoints when it runs again)");
  auto* watch = app.add_subcommand("watch", "follow a job live until it ends");
  watch->add_option("id", a->id, "job id or name")->required();
  watch
      ->add_option("-o,--output", a->watch_output,
                   "text (a live line) | json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  AddReconnectFlag(watch, a);
  auto* cancel = app.add_subcommand(
      "cancel",
      "cancel jobs (ids, names, -l, --state, --name): their ranks checkpoint at their next step "
      "and stop");
  AddSelection(cancel, a);
  cancel->add_flag(
      "--now", a->now,
      "kill the ranks at once, without the checkpoint (the newest periodic one is left)");
  auto* del =
      app.add_subcommand("delete",
                         "delete a finished job and its events, a lost worker (or all of them), or "
                         "a node");
  del->require_subcommand(1);
  auto* del_job = del->add_subcommand("job", "finished jobs (ids, names, -l, --state, --name)");
  AddSelection(del_job, a);
  auto* del_worker =
      del->add_subcommand("worker", "one lost worker (a connected one leaves on SIGTERM)");
  del_worker->add_option("name", a->name, "worker name")->required();
  auto* del_workers = del->add_subcommand("workers", "every worker in a state: --state lost");
  del_workers->add_option("--state", a->states, "lost (the only state deleted in bulk)")
      ->required();
  auto* del_node = del->add_subcommand(
      "node",
      "revoke a node's credential and forget its workers (their ranks are lost: their jobs restart "
      "elsewhere); the node may bootstrap again with the worker token");
  del_node->add_option("name", a->name, "node name")->required();
  auto* drain = app.add_subcommand(
      "drain", "stop placing new work on a worker (--wait: and move its rank off it)");
  drain->add_option("name", a->name, "worker name")->required();
  drain->add_flag(
      "--wait", a->wait,
      "also checkpoint and stop its rank (the job continues elsewhere, no restart used) and wait "
      "until the worker runs nothing");
  drain
      ->add_option("--wait-seconds", a->wait_seconds,
                   "--wait: give up after this long (the worker stays drained)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  auto* undrain = app.add_subcommand("undrain", "let a drained worker take work again");
  undrain->add_option("name", a->name, "worker name")->required();
  auto* logs = app.add_subcommand("logs", "a rank's output, from the worker that runs or ran it");
  logs->add_option("id", a->logs.id, "job id or name")->required();
  logs->add_option("--rank", a->logs.rank, "which rank")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  logs->add_option("--attempt", a->logs.attempt, "which attempt (default: the latest)")
      ->check(CLI::PositiveNumber);
  logs->add_option("--tail", a->logs.tail, "the last N lines (default: all)")
      ->check(CLI::PositiveNumber);
  logs->add_flag("-f,--follow", a->logs.follow, "keep printing new output until the rank ends");
  logs->add_flag("--all-ranks", a->logs.all_ranks,
                 "every rank of the attempt in rank order, each line prefixed [rank N]");
  logs->add_flag(
      "--raw", a->logs.raw,
      "the rank's bytes as they are (default: control characters and escape sequences print "
      "escaped)");
  auto* top = app.add_subcommand("top", "live table of running jobs and racks");
  top->add_option("--interval", a->refresh, "refresh seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  top->add_flag("--once", a->once, "print once and exit");
  auto* admin = app.add_subcommand("admin", "the controller itself");
  admin->require_subcommand(1);
  auto* step_down = admin->add_subcommand(
      "step-down",
      "the leading controller hands over to a standby (moe-controller --store etcd://...) and "
      "stops; its supervisor starts it again as a standby");
  out.push_back({step_down, [&c] { return StepDown(c); }});
  out.insert(out.end(), {{submit, [&c, a] { return Submit(c, *a); }},
                         {watch, [&c, a] { return WatchByRef(c, *a); }},
                         {cancel, [&c, a] { return Cancel(c, *a); }},
                         {del_job, [&c, a] { return DeleteJob(c, *a); }},
                         {del_worker, [&c, a] { return DeleteWorker(c, *a); }},
                         {del_workers, [&c, a] { return DeleteWorkers(c, *a); }},
                         {del_node, [&c, a] { return DeleteNode(c, *a); }},
                         {drain, [&c, a] { return Drain(c, *a, true); }},
                         {undrain, [&c, a] { return Drain(c, *a, false); }},
                         {logs, [&c, a] { return LogsByRef(c, *a); }},
                         {top, [&c, a] { return RunTop(c, *a); }}});
  return out;
}

}  // namespace moe::cli
