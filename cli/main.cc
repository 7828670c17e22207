// moectl: the command line of MoE Orchestrator, in kubectl's habits.
//
//   moectl submit -f job.yaml            prints the new job's id alone on stdout
//   moectl get jobs | get job ID [-o table|json|yaml] | get workers
//   moectl describe job ID | watch ID | cancel ID | drain NAME | undrain NAME | top
//
// Exit codes (for scripts): 0 ok; 1 other errors; 2 usage; 3 not found; 4 not allowed (token);
// 5 controller unreachable or too slow; 6 refused (invalid or infeasible request);
// watch: 0 when the job succeeded, 10 failed, 11 cancelled.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/format.h"
#include "cli/top.h"
#include "common/grpc_client.h"
#include "common/job_spec_proto.h"
#include "common/yaml.h"
#include "moe/v1/job_service.grpc.pb.h"
#include <google/protobuf/util/json_util.h>

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

int ExitCodeFor(const moe::Status& st) {
  switch (st.code()) {
    case moe::StatusCode::kOk: return 0;
    case moe::StatusCode::kNotFound: return 3;
    case moe::StatusCode::kUnauthenticated:
    case moe::StatusCode::kPermissionDenied: return 4;
    case moe::StatusCode::kUnavailable:
    case moe::StatusCode::kDeadlineExceeded: return 5;
    case moe::StatusCode::kInvalidArgument:
    case moe::StatusCode::kFailedPrecondition:
    case moe::StatusCode::kAlreadyExists: return 6;
    default: return 1;
  }
}

int Fail(const moe::Status& st, const std::string& controller) {
  std::string msg = st.message();
  if (st.code() == moe::StatusCode::kUnavailable) msg += " (is the controller running at " + controller + "?)";
  std::fprintf(stderr, "moectl: %s: %s\n", std::string(moe::StatusCodeName(st.code())).c_str(), msg.c_str());
  return ExitCodeFor(st);
}

std::string JobJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string JobYaml(const google::protobuf::Message& m) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(m, &json, google::protobuf::util::JsonPrintOptions());
  auto doc = moe::ParseYaml(json);
  return doc.ok() ? moe::ToYaml(*doc) : json + "\n";
}

struct Client {
  moe::ClientOptions options;
  double timeout = 10;
  std::unique_ptr<moe::v1::JobService::Stub> stub;

  moe::Status Connect() {
    auto channel = moe::MakeChannel(options);
    if (!channel.ok()) return channel.status();
    stub = moe::v1::JobService::NewStub(*channel);
    return moe::OkStatus();
  }
  template <typename Req, typename Resp, typename Method>
  moe::Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    moe::PrepareContext(&ctx, options, timeout);
    return moe::FromGrpc((stub.get()->*method)(&ctx, req, resp));
  }
};

std::string Clock(double t) {
  const time_t s = static_cast<time_t>(t);
  tm local;
  localtime_r(&s, &local);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &local);
  return buf;
}

int Watch(Client& c, const std::string& id, bool json) {
  moe::v1::WatchJobRequest req;
  req.set_id(id);
  grpc::ClientContext ctx;
  moe::PrepareContext(&ctx, c.options, 0);  // as long as the job runs
  auto reader = c.stub->WatchJob(&ctx, req);
  const bool tty = ::isatty(STDOUT_FILENO);
  moe::v1::WatchJobResponse r;
  moe::v1::Job last;
  bool have_job = false, line_open = false, first_snapshot = true;
  double first_loss = 0;
  int64_t last_printed_step = -1;
  auto last_print = std::chrono::steady_clock::now() - std::chrono::hours(1);
  auto end_line = [&] {
    if (line_open) std::printf("\n");
    line_open = false;
  };
  while (reader->Read(&r)) {
    if (json) {
      // One JSON object per line: for scripts (every step's metrics, every event).
      std::string line;
      (void)google::protobuf::util::MessageToJsonString(r, &line, google::protobuf::util::JsonPrintOptions());
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      if (r.has_job()) {
        last = r.job();
        have_job = true;
      }
      continue;
    }
    if (r.has_job()) {
      last = r.job();
      have_job = true;
      if (first_snapshot) {
        std::printf("watching %s (%s)\n", last.id().c_str(), moe::cli::StateName(last.state()).c_str());
        first_snapshot = false;
      }
    } else if (r.has_event()) {
      end_line();
      const auto& e = r.event();
      std::printf("%s  %-12s %-10s %s\n", Clock(e.time()).c_str(), e.type().c_str(),
                  moe::cli::StateName(e.state()).c_str(), e.message().c_str());
    } else if (r.has_metrics()) {
      const auto& m = r.metrics();
      if (first_loss == 0) first_loss = m.loss();
      const auto now = std::chrono::steady_clock::now();
      if (tty) {
        std::printf("\r%s\033[K", moe::cli::ProgressLine(m).c_str());
        line_open = true;
      } else if (now - last_print > std::chrono::seconds(5) || m.step() == m.total_steps()) {
        std::printf("%s\n", moe::cli::ProgressLine(m).c_str());
        last_print = now;
      }
      last_printed_step = m.step();
    }
    std::fflush(stdout);
  }
  end_line();
  const grpc::Status st = reader->Finish();
  if (!st.ok()) return Fail(moe::FromGrpc(st), c.options.address);
  (void)last_printed_step;
  if (!have_job) return 1;
  const auto& m = last.last_metrics();
  if (json) return last.state() == moe::v1::SUCCEEDED ? 0 : (last.state() == moe::v1::CANCELLED ? 11 : 10);
  std::printf("%s %s", last.id().c_str(), moe::cli::StateName(last.state()).c_str());
  if (!last.message().empty()) std::printf(": %s", last.message().c_str());
  std::printf("\n");
  if (m.step() > 0) {
    std::printf("summary: %lld steps, loss %.4f -> %.4f, %.4f TFLOP/s per device, MFU %.1f%% (against %s), %.0f tokens/s, "
                "%d restart(s)\n",
                static_cast<long long>(m.step()), first_loss > 0 ? first_loss : m.loss(), m.loss(), m.tflops_per_device(),
                m.mfu() * 100, m.mfu_peak_source().c_str(), m.tokens_per_second(), last.restarts());
  }
  switch (last.state()) {
    case moe::v1::SUCCEEDED: return 0;
    case moe::v1::CANCELLED: return 11;
    default: return 10;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moectl: submit, inspect and control MoE training jobs"};
  app.require_subcommand(1);
  Client c;
  const char* env_controller = std::getenv("MOE_CONTROLLER");
  const char* env_token = std::getenv("MOE_TOKEN");
  c.options.address = env_controller ? env_controller : "127.0.0.1:50051";
  c.options.token = env_token ? env_token : "";
  app.add_option("--controller", c.options.address, "controller address host:port ($MOE_CONTROLLER)")->capture_default_str();
  app.add_option("--token", c.options.token, "bearer token ($MOE_TOKEN)");
  app.add_option("--tls-ca", c.options.tls_ca, "CA of the controller's certificate (PEM): TLS");
  app.add_option("--tls-cert", c.options.tls_cert, "client certificate (PEM) for mTLS");
  app.add_option("--tls-key", c.options.tls_key, "client key (PEM) for mTLS");
  app.add_option("--timeout", c.timeout, "deadline of each call, seconds")->capture_default_str()->check(CLI::PositiveNumber);

  std::string file, output = "table", id, name;
  auto* submit = app.add_subcommand("submit", "submit a job file; prints the job's id");
  submit->add_option("-f,--file", file, "job file (YAML or JSON)")->required();
  auto* get = app.add_subcommand("get", "list jobs or workers, or show one job");
  get->require_subcommand(1);
  auto* get_jobs = get->add_subcommand("jobs", "all jobs");
  auto* get_job = get->add_subcommand("job", "one job");
  get_job->add_option("id", id, "job id")->required();
  auto* get_workers = get->add_subcommand("workers", "all workers");
  for (auto* sub : {get_jobs, get_job, get_workers}) {
    sub->add_option("-o,--output", output, "table | json | yaml")->check(CLI::IsMember({"table", "json", "yaml"}))->capture_default_str();
  }
  auto* describe = app.add_subcommand("describe", "spec, placement, events and last metrics of a job");
  describe->require_subcommand(1);
  auto* describe_job = describe->add_subcommand("job", "one job");
  describe_job->add_option("id", id, "job id")->required();
  auto* watch = app.add_subcommand("watch", "follow a job live until it ends");
  watch->add_option("id", id, "job id")->required();
  std::string watch_output = "text";
  watch->add_option("-o,--output", watch_output, "text (a live line) | json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("id", id, "job id")->required();
  auto* drain = app.add_subcommand("drain", "stop placing new work on a worker");
  drain->add_option("name", name, "worker name")->required();
  auto* undrain = app.add_subcommand("undrain", "let a drained worker take work again");
  undrain->add_option("name", name, "worker name")->required();
  double refresh = 2;
  bool once = false;
  auto* top = app.add_subcommand("top", "live table of running jobs and racks");
  top->add_option("--interval", refresh, "refresh seconds")->capture_default_str()->check(CLI::PositiveNumber);
  top->add_flag("--once", once, "print once and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (moe::Status st = c.Connect(); !st.ok()) return Fail(st, c.options.address);
  using Stub = moe::v1::JobService::Stub;

  if (submit->parsed()) {
    std::ifstream in(file);
    if (!in) return Fail(moe::NotFoundError("-f " + file + ": cannot read the file"), c.options.address);
    std::stringstream ss;
    ss << in.rdbuf();
    auto job = moe::TrainingJobFromText(ss.str());
    if (!job.ok()) return Fail(job.status().WithPrefix(file), c.options.address);
    moe::v1::SubmitJobRequest req;
    *req.mutable_job() = *job;
    moe::v1::Job resp;
    if (moe::Status st = c.Call(&Stub::SubmitJob, req, &resp); !st.ok()) return Fail(st, c.options.address);
    std::printf("%s\n", resp.id().c_str());
    return 0;
  }
  if (get_jobs->parsed()) {
    moe::v1::ListJobsResponse resp;
    if (moe::Status st = c.Call(&Stub::ListJobs, moe::v1::ListJobsRequest(), &resp); !st.ok()) return Fail(st, c.options.address);
    if (output == "json") std::printf("%s\n", JobJson(resp).c_str());
    else if (output == "yaml") std::printf("%s", JobYaml(resp).c_str());
    else std::printf("%s", moe::cli::JobsTable({resp.jobs().begin(), resp.jobs().end()}, Now()).c_str());
    return 0;
  }
  if (get_job->parsed() || describe_job->parsed()) {
    moe::v1::GetJobRequest req;
    req.set_id(id);
    moe::v1::Job resp;
    if (moe::Status st = c.Call(&Stub::GetJob, req, &resp); !st.ok()) return Fail(st, c.options.address);
    if (describe_job->parsed()) std::printf("%s", moe::cli::Describe(resp, Now()).c_str());
    else if (output == "json") std::printf("%s\n", JobJson(resp).c_str());
    else if (output == "yaml") std::printf("%s", JobYaml(resp).c_str());
    else std::printf("%s", moe::cli::JobsTable({resp}, Now()).c_str());
    return 0;
  }
  if (get_workers->parsed()) {
    moe::v1::ListWorkersResponse resp;
    if (moe::Status st = c.Call(&Stub::ListWorkers, moe::v1::ListWorkersRequest(), &resp); !st.ok()) return Fail(st, c.options.address);
    if (output == "json") std::printf("%s\n", JobJson(resp).c_str());
    else if (output == "yaml") std::printf("%s", JobYaml(resp).c_str());
    else std::printf("%s", moe::cli::WorkersTable({resp.workers().begin(), resp.workers().end()}, Now()).c_str());
    return 0;
  }
  if (watch->parsed()) return Watch(c, id, watch_output == "json");
  if (cancel->parsed()) {
    moe::v1::CancelJobRequest req;
    req.set_id(id);
    moe::v1::Job resp;
    if (moe::Status st = c.Call(&Stub::CancelJob, req, &resp); !st.ok()) return Fail(st, c.options.address);
    std::printf("%s %s\n", resp.id().c_str(), moe::cli::StateName(resp.state()).c_str());
    return 0;
  }
  if (drain->parsed() || undrain->parsed()) {
    moe::v1::DrainWorkerRequest req;
    req.set_name(name);
    moe::v1::Worker resp;
    auto method = drain->parsed() ? &Stub::DrainWorker : &Stub::UndrainWorker;
    if (moe::Status st = c.Call(method, req, &resp); !st.ok()) return Fail(st, c.options.address);
    std::printf("%s %s\n", resp.name().c_str(), moe::cli::WorkerStateName(resp.state()).c_str());
    return 0;
  }
  if (top->parsed()) {
    return moe::cli::Top(
        [&](moe::v1::ListJobsResponse* jobs, moe::v1::ListWorkersResponse* workers) -> moe::Status {
          moe::v1::ListJobsRequest req;
          req.add_states(moe::v1::RUNNING);
          req.add_states(moe::v1::SCHEDULED);
          req.add_states(moe::v1::RESTARTING);
          MOE_RETURN_IF_ERROR(c.Call(&Stub::ListJobs, req, jobs));
          return c.Call(&Stub::ListWorkers, moe::v1::ListWorkersRequest(), workers);
        },
        refresh, once, [&](const moe::Status& st) { return Fail(st, c.options.address); });
  }
  return 2;
}
