// moe-controller: the composition root. Builds the managers, wires them, serves gRPC and /metrics.
//
//   moe-controller --listen ADDR --metrics-listen ADDR --state-dir DIR [--tls-cert F --tls-key F
//                  [--tls-client-ca F]] [--tokens FILE] [--lease-seconds S] [--checkpoint-root DIR]
//   moe-controller --store etcd://HOST:PORT[,...][/PREFIX] ...   (a leader and its standbys)
//
// Every setting and its default is in ControllerConfig (config.h); the flags write into it.
#include <prometheus/registry.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "common/http_health.h"
#include "common/log.h"
#include "common/service_log.h"
#include "controller/auth.h"
#include "controller/config.h"
#include "controller/controller.h"
#include "controller/grpc_server.h"
#include "controller/metrics_aggregator.h"
#include "controller/net_policy.h"
#include "controller/state_store.h"
#include "controller/store_choice.h"
#include "prometheus/gauge.h"

namespace {

using moe::controller::ControllerConfig;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
std::atomic<bool> g_serving{false};      // gRPC started (readiness)
std::atomic<int64_t> g_last_tick_ms{0};  // the loop's last tick, steady clock (liveness)
const auto g_process_metrics = moe::ProcessCollector();  // process_* on /metrics
// With --store etcd: the leader a standby waits behind (readiness says it), and why this controller
// lost its leadership ("" while it leads or never led).
absl::Mutex g_leader_mu;
std::string g_leader ABSL_GUARDED_BY(g_leader_mu);
std::string g_lost ABSL_GUARDED_BY(g_leader_mu);
int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Serving and security.
void BindServingFlags(CLI::App& app, ControllerConfig& c) {
  app.add_option("--listen", c.server.listen, "gRPC address (host:port)")->capture_default_str();
  app.add_option("--metrics-listen", c.metrics_listen, "Prometheus /metrics address (host:port)")
      ->capture_default_str();
  app.add_option("--state-dir", c.state_dir,
                 "directory of the durable state (SQLite; required unless --store etcd://...)");
  app.add_option("--store", c.store,
                 "sqlite (the embedded default, in --state-dir) or etcd://HOST:PORT[,HOST:PORT...]"
                 "[/PREFIX]: the state in etcd, one leader among the controllers on it, the others "
                 "standbys that refuse calls with the leader's address")
      ->capture_default_str();
  app.add_option("--advertise-address", c.advertise_address,
                 "with --store etcd: the address clients reach this controller at, which standbys "
                 "name in their refusals (default: --listen)");
  app.add_option("--leader-lease-seconds", c.leader_lease_seconds,
                 "with --store etcd: a leader that has not renewed its lease for this long is "
                 "replaced by a standby (2 to 60)")
      ->capture_default_str();
  app.add_option("--tls-cert", c.server.tls_cert, "server certificate (PEM); TLS with --tls-key");
  app.add_option("--tls-key", c.server.tls_key, "server private key (PEM)");
  app.add_option("--tls-client-ca", c.server.tls_client_ca,
                 "CA for client certificates (PEM): mutual TLS");
  app.add_option("--tokens", c.tokens_file,
                 "bearer tokens file: '<token> <admin|viewer|worker> [name]' per line");
  app.add_flag("--allow-insecure-remote", c.allow_insecure_remote,
               "listen beyond loopback without --tokens (not recommended)");
  app.add_flag(
      "--allow-cleartext-tokens", c.allow_cleartext_tokens,
      "accept --tokens beyond loopback without TLS: tokens then travel in clear (not recommended)");
  app.add_flag("--allow-remote-metrics", c.allow_remote_metrics,
               "serve /metrics (no token needed) beyond loopback");
  app.add_flag("--grpc-reflection", c.server.reflection,
               "serve gRPC reflection (grpcurl's listing of services and messages) even with "
               "--tokens: it answers without a token (default: only without --tokens)");
  app.add_flag(
      "!--no-udp-heartbeats", c.server.heartbeat_udp,
      "agents heartbeat on their gRPC streams only (default: by UDP datagram on the --listen "
      "port, with the stream as the fallback; docs/architecture.md, Leases)");
}

// Workers, jobs, metrics and logs.
void BindPolicyFlags(CLI::App& app, ControllerConfig& c) {
  app.add_option("--lease-seconds", c.lease_seconds, "a worker silent this long is lost")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--reconnect-grace-seconds", c.reconnect_grace_seconds,
                 "after a restart, how long running ranks get to report back (it runs once the "
                 "controller has admitted every agent it told to come back later)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--lost-worker-retention-seconds", c.lost_worker_retention_seconds,
                 "a lost worker that has not come back in this long is forgotten (0: kept until "
                 "moectl delete worker)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--goodput-floor", c.goodput_floor,
                 "MoEJobGoodputLow fires for a job whose goodput over the last hour is below this "
                 "(productive / wall seconds; exported as moe_goodput_floor)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--mtbf-hours", c.mtbf_hours,
                 "a device's mean time between failures in hours (the public planning figure for a "
                 "GPU: 50000): moectl describe advises each job's checkpoint interval from it and "
                 "the job's measured step time, save stall and restarts (0: no advice)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-workers", c.max_workers,
                 "live workers (devices) at most; more registrations are refused (lost ones "
                 "count toward no limit)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-nodes", c.max_nodes,
                 "with --tokens: node credentials issued at most (WorkerService.Bootstrap)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-devices-per-node", c.max_devices_per_node,
                 "with --tokens: workers (devices) one node's credential may hold, live and lost "
                 "(its lost ones without a rank are forgotten first to make room)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-job-ranks", c.max_job_ranks,
                 "refuse jobs of more ranks than this at submit (0: none; a smaller job the "
                 "workers cannot hold yet "
                 "waits for capacity)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--spares-per-rack", c.spares_per_rack,
                 "healthy workers of each rack (per device type) held back from new jobs; a "
                 "restart that lost a worker takes them, its rack's first (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));  // a readable bound in the refusal of a negative one
  app.add_flag("!--no-preemption", c.preemption,
               "never stop running jobs for queued ones of higher priority");
  app.add_option("--restart-backoff-seconds", c.restart_backoff_seconds,
                 "a failed attempt restarts after this long, doubling with each restart of the job "
                 "(0: at once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--restart-backoff-max-seconds", c.restart_backoff_max_seconds,
                 "the longest wait before a restart")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rank-start-seconds", c.rank_start_seconds,
                 "an assigned rank that has not started by then fails its attempt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--finished-job-retention-seconds", c.finished_job_retention_seconds,
                 "finished jobs and their events older than this are deleted (0: kept)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag(
      "--allow-workers-without-memory", c.allow_unknown_memory,
      "place jobs on workers that report no memory (moe-worker --memory-gb unset) although the "
      "job's memory per rank is known");
  app.add_flag("--allow-network-state-dir", c.allow_network_state_dir,
               "keep the state directory on NFS, CIFS/SMB or AFS although SQLite's locks "
               "cannot be trusted there (refused by default)");
  app.add_flag("--allow-clock-jump", c.allow_clock_jump,
               "start although the clock reads more than a week past the newest stored change (the "
               "controller really was stopped that long)");
  app.add_option("--checkpoint-root", c.checkpoint_root,
                 "checkpoints of jobs without spec.checkpoint.dir go to <root>/<job id> "
                 "(default <state-dir>/checkpoints; must be shared with the workers)");
  app.add_option("--metrics-retention-seconds", c.metrics_retention_seconds,
                 "how long series of finished jobs stay on /metrics")
      ->capture_default_str();
  app.add_option("--straggler-margin", c.straggler.margin,
                 "flag a rank whose compute time exceeds the median by this fraction")
      ->capture_default_str();
  app.add_option("--straggler-window", c.straggler.window, "... for this many consecutive steps")
      ->capture_default_str();
  moe::AddServiceLogFlags(app, &c.log);
}

// --priority-class production=1000:never-preempted research=100 best-effort=-100
moe::Status ParsePriorityClasses(const std::vector<std::string>& flags, ControllerConfig* c) {
  for (const std::string& f : flags) {
    const size_t eq = f.find('=');
    std::string value = eq == std::string::npos ? "" : f.substr(eq + 1);
    ControllerConfig::PriorityClass pc;
    if (const size_t colon = value.find(':'); colon != std::string::npos) {
      if (value.substr(colon + 1) != "never-preempted") {
        return moe::InvalidArgumentError("--priority-class " + f +
                                         ": after ':' only 'never-preempted' is known");
      }
      pc.preemptible = false;
      value = value.substr(0, colon);
    }
    char* end = nullptr;
    const long long v = value.empty() ? 0 : std::strtoll(value.c_str(), &end, 10);
    if (eq == 0 || eq == std::string::npos || value.empty() || *end != 0 || v < -1000000000 ||
        v > 1000000000) {
      return moe::InvalidArgumentError("--priority-class " + f +
                                       ": expected NAME=PRIORITY[:never-preempted], "
                                       "PRIORITY an integer in -1000000000..1000000000");
    }
    pc.priority = v;
    c->priority_classes[f.substr(0, eq)] = pc;
  }
  return moe::OkStatus();
}

moe::Status LoadPlanProfiles(const std::string& cluster, std::string software, ControllerConfig* c);

// The settings that come from files or need parsing: plan profiles, priority classes, queues.
moe::Status LoadConfigFiles(const std::string& plan_cluster, const std::string& plan_software,
                            const std::vector<std::string>& classes, const std::string& queues,
                            ControllerConfig* c) {
  MOE_RETURN_IF_ERROR(LoadPlanProfiles(plan_cluster, plan_software, c));
  MOE_RETURN_IF_ERROR(ParsePriorityClasses(classes, c));
  if (queues.empty()) return moe::OkStatus();
  auto q = moe::controller::LoadQueuesFile(queues);
  if (!q.ok()) return q.status();
  c->queues = std::move(*q);
  return moe::OkStatus();
}

// --plan-cluster / --plan-software: the profiles each attempt's planned step time comes from.
moe::Status LoadPlanProfiles(const std::string& cluster, std::string software,
                             ControllerConfig* c) {
  if (cluster.empty()) {
    if (!software.empty()) return moe::InvalidArgumentError("--plan-software needs --plan-cluster");
    return moe::OkStatus();
  }
  auto profile = cluster == "local" ? moe::ProbeLocalCluster() : moe::LoadClusterProfile(cluster);
  if (!profile.ok()) return profile.status().WithPrefix("--plan-cluster");
  if (software.empty()) software = moe::DefaultSoftwareFor(*profile);
  auto sw = moe::LoadSoftwareProfile(software);
  if (!sw.ok()) return sw.status().WithPrefix("--plan-software");
  c->plan_cluster = *profile;
  c->plan_cluster_is_machine = cluster == "local";
  c->plan_software = *sw;
  return moe::OkStatus();
}

moe::Status SetUpProcess(const ControllerConfig& c) {
  moe::ServiceLogOptions log = c.log;
  log.component = "controller";
  MOE_RETURN_IF_ERROR(moe::InitServiceLog(log));
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGXFSZ, SIG_IGN);  // a file-size limit is an error the store reports, not a crash
  ::signal(SIGINT, OnSignal);
  ::signal(SIGTERM, OnSignal);
  return moe::OkStatus();
}

// An explicit --checkpoint-root is made when missing and this machine can (a worker confined to
// it refuses to start while it does not exist); elsewhere each job's first rank makes its own
// directory below it. The default (<state-dir>/checkpoints) is left to the first job that needs it.
void MakeCheckpointRoot(const std::string& root) {
  if (root.empty() || moe::PathExists(root)) return;
  if (moe::Status st = moe::MakeDirs(root); st.ok()) {
    MOE_LOG(INFO) << "--checkpoint-root " << root << ": created";
  } else {
    MOE_LOG(WARNING) << "--checkpoint-root " << root << ": not created here (" << st
                     << "); the workers must see it";
  }
}

using moe::controller::IsLoopbackAddress;

// Who may call: the tokens file, or nobody checked, which is only allowed on loopback unless the
// operator insists. Tokens beyond loopback need TLS, and /metrics beyond loopback its own flag.
moe::StatusOr<moe::controller::TokenAuth> CheckExposure(const ControllerConfig& c) {
  if (!IsLoopbackAddress(c.metrics_listen) && !c.allow_remote_metrics) {
    return moe::InvalidArgumentError("--metrics-listen " + c.metrics_listen +
                                     " is not a loopback address: /metrics needs no token; pass "
                                     "--allow-remote-metrics to serve it there");
  }
  if (!c.tokens_file.empty()) {
    if (!IsLoopbackAddress(c.server.listen) && c.server.tls_cert.empty() &&
        !c.allow_cleartext_tokens) {
      return moe::InvalidArgumentError("--listen " + c.server.listen +
                                       " is not a loopback address and TLS is off: tokens would "
                                       "travel in clear; pass --tls-cert and "
                                       "--tls-key (or --allow-cleartext-tokens)");
    }
    auto loaded = moe::controller::TokenAuth::Load(c.tokens_file);
    if (!loaded.ok()) return moe::InvalidArgumentError("--tokens: " + loaded.status().message());
    return loaded;
  }
  if (!IsLoopbackAddress(c.server.listen) && !c.allow_insecure_remote) {
    return moe::InvalidArgumentError(
        "--listen " + c.server.listen +
        " is not a loopback address: without --tokens anyone could submit jobs; "
        "pass --tokens FILE (or --allow-insecure-remote)");
  }
  return moe::controller::TokenAuth();
}

// /metrics (the registry's families, process_*) and /healthz, /readyz (ControllerProbes) on our own
// HTTP server: one event thread with a deadline for each request's head and caps on connections,
// so slow or idle clients cannot hold the probes or the scrape up (common/http_server.h).
moe::StatusOr<std::unique_ptr<moe::HttpServer>> ServeMetrics(
    const ControllerConfig& c, std::shared_ptr<prometheus::Registry> registry) {
  auto server = moe::ServeHealthAndMetrics(c.metrics_listen, {registry, g_process_metrics});
  if (!server.ok()) {
    return moe::UnavailableError("--metrics-listen " + c.metrics_listen +
                                 ": cannot serve /metrics there (" + server.status().message() +
                                 ")");
  }
  return server;
}

// Alive while its loop ticks (a controller wedged for kLiveSeconds is restarted by its
// supervisor); ready once it has recovered its state and serves gRPC, until it stops.
moe::HealthProbes ControllerProbes() {
  constexpr double kLiveSeconds = 30;
  moe::HealthProbes p;
  p.live = [] {
    const int64_t last = g_last_tick_ms.load();
    if (last == 0) return moe::ProbeAnswer{true, "starting"};
    const double age = static_cast<double>(NowMs() - last) / 1000;
    if (age < kLiveSeconds) return moe::ProbeAnswer{};
    return moe::ProbeAnswer{false, "the controller's loop has not run for " +
                                       std::to_string(static_cast<int>(age)) + " s"};
  };
  p.ready = [] {
    if (g_stop) return moe::ProbeAnswer{false, "stopping"};
    if (!g_serving.load()) {
      absl::MutexLock lock(&g_leader_mu);
      if (!g_lost.empty()) return moe::ProbeAnswer{false, "lost the leadership: " + g_lost};
      if (!g_leader.empty()) return moe::ProbeAnswer{false, "a standby; the leader is " + g_leader};
    }
    if (!g_serving.load()) return moe::ProbeAnswer{false, "recovering its state, not serving yet"};
    return moe::ProbeAnswer{};
  };
  return p;
}

// Ticks until a signal, or until another controller took over the state (non-OK then).
prometheus::Gauge& LeaderGauge(prometheus::Registry& registry) {
  return prometheus::BuildGauge()
      .Name("moe_controller_leader")
      .Help("1 while this controller leads (serves), 0 while a standby (--store etcd)")
      .Register(registry)
      .Add({});
}

// Why this controller must stop ("" while it may go on): another took over its state (a higher
// epoch), its etcd store refused a write for the fence or could not settle one, or it lost the
// leadership (its lease, a step-down).
std::string StopReason(moe::controller::Controller& controller,
                       const moe::controller::OpenedStore& store) {
  if (std::string why = controller.Fenced(); !why.empty()) return why;
  if (store.etcd_store) {
    if (std::string why = store.etcd_store->fenced(); !why.empty()) return why;
  }
  absl::MutexLock lock(&g_leader_mu);
  return g_lost.empty() ? std::string() : "lost the leadership: " + g_lost;
}

moe::Status RunUntilSignalled(moe::controller::Controller& controller,
                              const moe::controller::OpenedStore& store) {
  while (!g_stop) {
    controller.Tick();
    g_last_tick_ms = NowMs();
    if (std::string why = StopReason(controller, store); !why.empty()) {
      return moe::AbortedError(why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return moe::OkStatus();
}

// --store: SQLite in --state-dir, or etcd once this controller leads (a standby until then: it
// refuses calls with the leader's address and is not ready).
moe::StatusOr<moe::controller::OpenedStore> OpenStore(const ControllerConfig& c) {
  if (!moe::controller::IsEtcdStore(c.store)) {
    if (c.store != "sqlite") {
      return moe::InvalidArgumentError(
          "--store " + c.store + ": expected sqlite or etcd://HOST:PORT[,HOST:PORT...][/PREFIX]");
    }
    return moe::controller::OpenSqliteStore(c);
  }
  {
    absl::MutexLock lock(&g_leader_mu);
    g_leader = "not elected yet";  // until the first look at etcd
  }
  moe::controller::StandbyHooks hooks;
  hooks.stop = [] { return g_stop.load(); };
  hooks.on_leader = [](const std::string& leader) {
    MOE_LOG(INFO) << (leader.empty() ? std::string("no leader elected yet")
                                     : "standby; the leader is " + leader);
    absl::MutexLock lock(&g_leader_mu);
    g_leader = leader.empty() ? "not elected yet" : leader;
  };
  return moe::controller::LeadOnEtcd(c, hooks);
}

// With --store etcd: the lease kept alive while this controller leads; losing it, or stepping down,
// stops the controller (RunUntilSignalled sees g_lost).
void KeepLeading(moe::controller::OpenedStore& opened, moe::controller::Controller& controller) {
  if (!opened.election) return;
  opened.election->KeepLeading([](const std::string& why) {
    absl::MutexLock lock(&g_leader_mu);
    if (!g_lost.empty()) return;  // a step-down said why first
    MOE_LOG(ERROR) << "lost the leadership: " << why << "; stopping (a standby takes over)";
    g_lost = why;
  });
  // The reason is set before the lease is revoked: the keeper sees the lease gone at once after.
  controller.SetStepDown([election = opened.election.get()]() -> moe::Status {
    {
      absl::MutexLock lock(&g_leader_mu);
      g_lost = "stepped down (moectl admin step-down)";
    }
    const moe::Status st = election->StepDown();
    if (!st.ok()) {
      absl::MutexLock lock(&g_leader_mu);
      g_lost.clear();  // still leading: nothing was revoked
    }
    return st;
  });
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "moe-controller: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // gRPC's own absl::Mutexes: abseil's lock-order graph (deadlock detection, on unless abseil's
  // headers saw NDEBUG) costs every lock a hash lookup, a few per cent of a core at 16,384 agents'
  // heartbeats. Our mutexes are std::mutex (common/mutex.h); ThreadSanitizer checks them.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Parse flags.
  ControllerConfig config;
  CLI::App app{"moe-controller: schedules MoE training jobs onto rack-aware workers"};
  BindServingFlags(app, config);
  BindPolicyFlags(app, config);
  std::string plan_cluster, plan_software;
  app.add_option(
      "--plan-cluster", plan_cluster,
      "cluster profile the workers are (local: this machine, probed at start; gb300-nvl72, ... or "
      "a YAML "
      "path): each attempt gets a planned step time next to the measured one (docs/planning.md)");
  app.add_option("--plan-software", plan_software,
                 "software profile for --plan-cluster (default ours, ours-cpu on cpu)");
  std::vector<std::string> classes;
  app.add_option("--priority-class", classes,
                 "NAME=PRIORITY[:never-preempted] (repeatable): metadata.priority_class NAME gives "
                 "a job that priority; "
                 "never-preempted: running jobs of the class are not stopped for higher ones");
  std::string queues;
  app.add_option(
      "--queues", queues,
      "YAML file of queues with quotas per device type, cohorts and borrowing (docs/operations.md, "
      "Queues and quotas); jobs choose one by metadata.queue");
  CLI11_PARSE(app, argc, argv);
  config.Resolve();
  if (moe::Status st = LoadConfigFiles(plan_cluster, plan_software, classes, queues, &config);
      !st.ok()) {
    return Fail(st.message());
  }
  if (moe::Status st = SetUpProcess(config); !st.ok()) return Fail(st.message());
  // The default root (<state-dir>/checkpoints) too: workers on this host with default roots are
  // offered it (Registered.checkpoint_root), and it must be there for them.
  MakeCheckpointRoot(config.checkpoint_root);

  // Check exposure.
  auto auth = CheckExposure(config);
  if (!auth.ok()) return Fail(auth.status().message());

  auto registry = std::make_shared<prometheus::Registry>();
  moe::SetHealthProbes(ControllerProbes());
  auto metrics_server = ServeMetrics(config, registry);
  if (!metrics_server.ok()) return Fail(metrics_server.status().message());
  prometheus::Gauge& leader = LeaderGauge(*registry);
  // Open the store: the state directory (one controller per directory), or etcd once this one
  // leads.
  auto opened = OpenStore(config);
  if (!opened.ok() && opened.status().code() == moe::StatusCode::kCancelled && g_stop) {
    MOE_LOG(INFO) << "stopped while a standby";
    return 0;
  }
  if (!opened.ok()) return Fail(opened.status().message());
  leader.Set(1);

  // Build the managers and recover.
  moe::controller::RealClock clock;
  moe::controller::MetricsAggregator metrics(registry, clock, config.straggler,
                                             config.metrics_retention_seconds, MOE_VERSION);
  moe::controller::Controller controller(*opened->store, clock, metrics, config);
  KeepLeading(*opened, controller);
  if (moe::Status st = controller.Recover(); !st.ok()) {
    return Fail("recovering state from " + opened->where + ": " + st.ToString());
  }
  if (std::string why = StopReason(controller, *opened); !why.empty()) return Fail(why);

  // Serve.
  moe::controller::GrpcServer grpc_server(controller, *auth, clock);
  grpc_server.Count(*registry);
  // Reflection answers without a token: where tokens guard the rest, only when asked for.
  if (config.tokens_file.empty()) config.server.reflection = true;
  if (moe::Status st = grpc_server.Start(config.server); !st.ok()) {
    return Fail("--listen: " + st.message());
  }
  controller.registrations().Open();  // the reconnect grace counts from here, not from Recover
  g_serving = true;
  MOE_LOG(INFO) << "moe-controller " << MOE_VERSION << " serving gRPC on " << config.server.listen
                << (config.server.tls_cert.empty() ? "" : " (TLS)")
                << (config.server.tls_client_ca.empty() ? "" : " (mTLS)")
                << (auth->enabled() ? ", tokens required" : "") << "; /metrics on "
                << config.metrics_listen << "; state in " << opened->where;
  const moe::Status ran = RunUntilSignalled(controller, *opened);

  // Shut down.
  MOE_LOG(INFO)
      << "shutting down (running jobs carry on: their workers reconnect to the next controller)";
  controller.BeginShutdown();
  grpc_server.Shutdown();
  leader.Set(0);
  // A leader stopped by a signal hands over at once (a rolling update does not wait out a lease).
  if (ran.ok() && opened->election) (void)opened->election->StepDown();
  return ran.ok() ? 0 : Fail(ran.message());
}
