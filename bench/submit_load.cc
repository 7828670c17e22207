// moe-bench-submit: the jobs phase's clients of bench/load.py in C++, so that what the benchmark
// reads is the controller and not the Python clients' interpreter (one GIL for 20 threads put a
// floor of 12 to 25 ms under every call on the 2-core machine).
//
// --clients threads share one channel; each submits its share of --jobs jobs made from --template
// (a serialized moe.v1.TrainingJob: the seed job as the controller expanded it), each submit
// followed by a GetJob of the new job, every tenth by a ListJobs page of 100 (the default view,
// JOB_VIEW_BASIC since 2026-12-07, what moectl's table asks for) and a ListQueues
// (answered from memory: the floor, what a call costs with nothing to do); client k lists after
// its submits i with (i + k) % 10 == 0, so the clients, which run in step, do not all list at the
// same moment (they did: 20 pages of 100 jobs at once set ListJobs' p99). A job's world size is
// drawn from {1, 1, 2, 4, 8} per client (seeded by its index); the global batch follows it.
//
// --watchers threads each hold a WatchJob stream open on a job picked at random from those
// acknowledged and not seen to end, reading every update, and open another when it ends (as a
// dashboard or `moectl get -w` would); they were Python threads of bench/load.py until 2026-12-07,
// which put their interpreter on the clients' core beside the calls being timed. They start before
// the first submit and stay open after the last, until stdin closes (bench/load.py closes it when
// every job is final), so the controller streams steps to them for the whole phase.
//
// stdout: "id <job id>" as each submit is acknowledged, "done" once --out is written, and with
// --watchers, "watched <n> streams at most, <m> updates" once stdin closed. --out:
// JSON {wall, ids, errors, watch_streams_max, watch_updates (both as of "done"), lat: {SubmitJob:
// [s...], GetJob, ListJobs, ListQueues}, at: {the same methods: [s...]}}: each latency in seconds,
// end to end from this client, and when that call started (seconds after the clients started).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/args.h"
#include "common/grpc_client.h"
#include "moe/v1/job_service.grpc.pb.h"

namespace {

struct Shared {
  std::mutex mu;
  std::map<std::string, std::vector<double>> lat;
  std::map<std::string, std::vector<double>> at;  // each call's start, from the first submit
  double start = 0;
  std::vector<std::string> ids, errors;
  // The watchers': the jobs not seen to end yet, their open streams' contexts (so that Stop can
  // cancel them), counts.
  std::vector<std::string> live;
  std::vector<grpc::ClientContext*> watching;
  bool stopped = false;
  int64_t watch_streams_max = 0, watch_updates = 0;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One call with a 60 s deadline: its latency recorded under `method`; false (and the error kept)
// when it failed.
template <typename Call>
bool Timed(Shared& s, const std::string& method, const std::string& what, Call call) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const double t0 = Now();
  const grpc::Status st = call(&ctx);
  const double dt = Now() - t0;
  std::lock_guard<std::mutex> lock(s.mu);
  s.lat[method].push_back(dt);
  s.at[method].push_back(t0 - s.start);
  if (!st.ok())
    s.errors.push_back(what + ": " + std::to_string(st.error_code()) + " " + st.error_message());
  return st.ok();
}

void Client(moe::v1::JobService::Stub& stub, const moe::v1::TrainingJob& tmpl, int k, int n,
            Shared& s) {
  std::mt19937 rng(static_cast<unsigned>(k));
  const int sizes[] = {1, 1, 2, 4, 8};
  for (int i = 0; i < n; ++i) {
    moe::v1::SubmitJobRequest req;
    moe::v1::TrainingJob& job = *req.mutable_job();
    job = tmpl;
    job.mutable_metadata()->set_name("load-" + std::to_string(k) + "-" + std::to_string(i));
    const int ws = sizes[rng() % 5];
    auto& spec = *job.mutable_spec();
    spec.mutable_parallelism()->set_world_size(ws);
    spec.mutable_parallelism()->set_expert_parallel(1);
    spec.mutable_data()->set_global_batch_size(spec.data().micro_batch_size() * ws);
    spec.mutable_checkpoint()->set_dir("");  // the controller gives each its own
    moe::v1::Job created;
    const std::string what = "client " + std::to_string(k) + " job " + std::to_string(i);
    if (!Timed(s, "SubmitJob", what,
               [&](grpc::ClientContext* c) { return stub.SubmitJob(c, req, &created); }))
      continue;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.ids.push_back(created.id());
      s.live.push_back(created.id());
      std::printf("id %s\n", created.id().c_str());
      std::fflush(stdout);
    }
    moe::v1::GetJobRequest get;
    get.set_id(created.id());
    moe::v1::Job got;
    Timed(s, "GetJob", what, [&](grpc::ClientContext* c) { return stub.GetJob(c, get, &got); });
    if ((i + k) % 10 != 0) continue;  // staggered: 20 clients in step all listed at once
    moe::v1::ListJobsRequest list;
    list.set_page_size(100);
    moe::v1::ListJobsResponse page;
    Timed(s, "ListJobs", what,
          [&](grpc::ClientContext* c) { return stub.ListJobs(c, list, &page); });
    moe::v1::ListQueuesResponse queues;
    Timed(s, "ListQueues", what, [&](grpc::ClientContext* c) {
      return stub.ListQueues(c, moe::v1::ListQueuesRequest(), &queues);
    });
  }
}

// The next job to watch (a random acknowledged one not seen to end), its stream's context
// registered; "" once Stop was called.
std::string NextWatch(Shared& s, std::mt19937& rng, grpc::ClientContext* ctx) {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.stopped) return "";
      if (!s.live.empty()) {
        s.watching.push_back(ctx);
        s.watch_streams_max =
            std::max<int64_t>(s.watch_streams_max, static_cast<int64_t>(s.watching.size()));
        return s.live[rng() % s.live.size()];
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Watcher(moe::v1::JobService::Stub& stub, int k, Shared& s) {
  std::mt19937 rng(static_cast<unsigned>(1000 + k));
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(30));
    moe::v1::WatchJobRequest req;
    req.set_id(NextWatch(s, rng, &ctx));
    if (req.id().empty()) return;
    auto reader = stub.WatchJob(&ctx, req);
    moe::v1::WatchJobResponse update;
    int64_t n = 0;
    while (reader->Read(&update)) ++n;
    // OK: the job ended (its stream closes with the final snapshot), not to be watched again.
    // Cancelled by Stop: fine. One that failed at once (the controller gone) waits a little before
    // the next, not to spin.
    // NOT_FOUND: the job is gone (deleted, or past its retention): not to be watched again either.
    const grpc::Status st = reader->Finish();
    const bool ended = st.ok() || st.error_code() == grpc::StatusCode::NOT_FOUND;
    if (!ended && n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> lock(s.mu);
    s.watch_updates += n;
    s.watching.erase(std::find(s.watching.begin(), s.watching.end(), &ctx));
    if (auto it = std::find(s.live.begin(), s.live.end(), req.id()); ended && it != s.live.end()) {
      *it = std::move(s.live.back());
      s.live.pop_back();
    }
  }
}

void StopWatchers(Shared& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  s.stopped = true;
  for (grpc::ClientContext* ctx : s.watching) ctx->TryCancel();
}

std::string Quoted(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

std::string ToJson(const Shared& s, double wall) {
  std::ostringstream o;
  o.precision(9);
  o << "{\"wall\": " << wall << ", \"ids\": [";
  for (size_t i = 0; i < s.ids.size(); ++i) o << (i ? ", " : "") << Quoted(s.ids[i]);
  o << "], \"errors\": [";
  for (size_t i = 0; i < s.errors.size(); ++i) o << (i ? ", " : "") << Quoted(s.errors[i]);
  o << "], \"watch_streams_max\": " << s.watch_streams_max
    << ", \"watch_updates\": " << s.watch_updates << ", \"lat\": {";
  bool first = true;
  for (const auto& [method, xs] : s.lat) {
    o << (first ? "" : ", ") << Quoted(method) << ": [";
    for (size_t i = 0; i < xs.size(); ++i) o << (i ? ", " : "") << xs[i];
    o << "]";
    first = false;
  }
  o << "}, \"at\": {";
  first = true;
  for (const auto& [method, xs] : s.at) {
    o << (first ? "" : ", ") << Quoted(method) << ": [";
    for (size_t i = 0; i < xs.size(); ++i) o << (i ? ", " : "") << xs[i];
    o << "]";
    first = false;
  }
  o << "}}\n";
  return o.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string controller, tmpl_path, out_path;
  int64_t clients = 20, jobs = 1000, watchers = 0;
  moe::ArgParser args("moe-bench-submit", "bench/load.py's submitting clients, in C++");
  args.AddString("controller", &controller, "the controller's host:port");
  args.AddString("template", &tmpl_path, "a serialized moe.v1.TrainingJob to submit copies of");
  args.AddString("out", &out_path, "where the latencies go (JSON)");
  args.AddInt("clients", &clients, "concurrent clients (threads on one channel)");
  args.AddInt("jobs", &jobs, "jobs in all, split between the clients");
  args.AddInt("watchers", &watchers,
              "WatchJob streams held open (on random acknowledged jobs) until stdin closes");
  args.Require("controller");
  args.Require("template");
  args.Require("out");
  if (moe::Status st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.ToString().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  if (clients < 1 || jobs < clients || watchers < 0) {
    std::fprintf(
        stderr, "moe-bench-submit: --clients must be >= 1, --jobs >= --clients, --watchers >= 0\n");
    return 2;
  }
  moe::v1::TrainingJob tmpl;
  std::ifstream in(tmpl_path, std::ios::binary);
  if (!in || !tmpl.ParseFromIstream(&in)) {
    std::fprintf(stderr, "moe-bench-submit: --template %s: not a serialized moe.v1.TrainingJob\n",
                 tmpl_path.c_str());
    return 2;
  }
  grpc::ChannelArguments ch_args;
  ch_args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  ch_args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, moe::kReceiveWindowBytes);  // as moectl's
  auto channel = grpc::CreateCustomChannel(controller, grpc::InsecureChannelCredentials(), ch_args);
  auto stub = moe::v1::JobService::NewStub(channel);
  Shared shared;
  std::vector<std::thread> watching;
  for (int64_t k = 0; k < watchers; ++k)
    watching.emplace_back(Watcher, std::ref(*stub), static_cast<int>(k), std::ref(shared));
  const double t0 = Now();
  shared.start = t0;
  std::vector<std::thread> threads;
  for (int64_t k = 0; k < clients; ++k) {
    threads.emplace_back(Client, std::ref(*stub), std::cref(tmpl), static_cast<int>(k),
                         static_cast<int>(jobs / clients), std::ref(shared));
  }
  for (auto& t : threads) t.join();
  const double wall = Now() - t0;
  bool written;
  {
    std::ofstream out(out_path);
    std::lock_guard<std::mutex> lock(shared.mu);
    out << ToJson(shared, wall);
    written = static_cast<bool>(out);
  }
  std::printf("done\n");
  std::fflush(stdout);
  if (watchers > 0) {
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    StopWatchers(shared);
    for (auto& t : watching) t.join();
    std::printf("watched %lld streams at most, %lld updates\n",
                static_cast<long long>(shared.watch_streams_max),
                static_cast<long long>(shared.watch_updates));
  }
  return written ? 0 : 1;
}
