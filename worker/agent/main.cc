// moe-worker: the agent of one node, serving its devices.
//
//   moe-worker --controller ADDR [--devices 0-7|all|LIST | --slots N | --device cpu|cuda:N]
//              [--rack R] [--node N] [--name NAME] [--address ADDR] [--token-file F]
//              [--tls-ca F [--tls-cert F --tls-key F]] [--threads T]
//   moe-worker --controller ADDR --fake-step-seconds S [--fake-workers N] [--slots D]
//              [--fake-rack-size K]   (load tests: N fake nodes of D devices)
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/confined_dir.h"
#include "common/file_util.h"
#include "common/http_health.h"
#include "common/log.h"
#include "common/path_roots.h"
#include "common/service_log.h"
#include "worker/agent/agent.h"
#include "worker/agent/cpu_cores.h"
#include "worker/agent/fake_fleet.h"
#include "worker/agent/topology.h"

namespace {
// The signal that asked us to stop (SIGTERM, SIGINT), 0: none. A lock-free atomic, not a volatile
// sig_atomic_t: the handler writes it and the watcher thread reads it (TSan saw the race).
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be async-signal-safe");
void OnSignal(int sig) { g_signal.store(sig); }
using moe::worker::AgentView;
using Views = std::function<std::vector<AgentView>()>;

// The agents' state as gauges and counters, one series per agent (fake mode runs many).
std::vector<prometheus::MetricFamily> AgentFamilies(const std::vector<AgentView>& views) {
  using prometheus::MetricType;
  struct Def {
    const char* name;
    const char* help;
    MetricType type;
    double (*value)(const moe::worker::AgentState&);
  };
  static const Def defs[] = {
      {"moe_agent_registered", "1 while the agent has a session with the controller",
       MetricType::Gauge,
       [](const moe::worker::AgentState& s) { return s.registered ? 1.0 : 0.0; }},
      {"moe_agent_leaving", "1 while the agent stops cleanly (its ranks checkpoint and end)",
       MetricType::Gauge, [](const moe::worker::AgentState& s) { return s.leaving ? 1.0 : 0.0; }},
      {"moe_agent_devices", "devices the agent serves (GPUs, or CPU slots)", MetricType::Gauge,
       [](const moe::worker::AgentState& s) { return 1.0 * s.devices; }},
      {"moe_agent_ranks_running", "rank processes running under the agent", MetricType::Gauge,
       [](const moe::worker::AgentState& s) { return 1.0 * s.ranks_running; }},
      {"moe_agent_registrations_total", "sessions the controller accepted (1 + reconnects)",
       MetricType::Counter, [](const moe::worker::AgentState& s) { return 1.0 * s.registrations; }},
      {"moe_agent_ranks_started_total", "ranks the agent started", MetricType::Counter,
       [](const moe::worker::AgentState& s) { return 1.0 * s.ranks_started; }},
  };
  std::vector<prometheus::MetricFamily> out;
  for (const Def& d : defs) {
    prometheus::MetricFamily f{d.name, d.help, d.type, {}};
    for (const AgentView& v : views) {
      prometheus::ClientMetric m;
      m.label = {{"agent", v.name}, {"node", v.node}, {"rack", v.rack}};
      (d.type == MetricType::Counter ? m.counter.value : m.gauge.value) = d.value(v.state);
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
  }
  return out;
}

// Alive while the process serves; ready while every agent has a session and none is leaving.
moe::HealthProbes AgentProbes(Views views) {
  moe::HealthProbes p;
  p.ready = [views = std::move(views)] {
    for (const AgentView& v : views()) {
      if (v.state.leaving) return moe::ProbeAnswer{false, v.name + " is leaving"};
      if (!v.state.registered)
        return moe::ProbeAnswer{false, v.name + " is not registered with " + v.controller};
    }
    return moe::ProbeAnswer{};
  };
  return p;
}

// --health-listen: GET /healthz, /readyz and /metrics (the agents' state, process_*).
struct HealthEndpoint {
  std::shared_ptr<prometheus::Collectable> agents, process;
  std::unique_ptr<moe::HttpServer> server;
};
moe::StatusOr<std::unique_ptr<HealthEndpoint>> ServeHealth(const std::string& listen,
                                                           const Views& views) {
  auto h = std::make_unique<HealthEndpoint>();
  if (listen.empty()) return h;
  moe::SetHealthProbes(AgentProbes(views));
  h->agents = moe::CollectorOf([views] { return AgentFamilies(views()); });
  h->process = moe::ProcessCollector();
  auto server = moe::ServeHealthAndMetrics(listen, {h->agents, h->process});
  if (!server.ok()) {
    return moe::InvalidArgumentError("--health-listen " + listen + ": cannot serve there (" +
                                     server.status().message() + ")");
  }
  h->server = std::move(*server);
  MOE_LOG(INFO) << "health on http://" << listen << "/healthz, /readyz; metrics on /metrics";
  return h;
}

// Runs until a signal, which this thread turns into a clean leave (`leave`): signal handlers only
// set a flag. Returns what `run` returned.
moe::Status RunUntilSignal(const std::function<moe::Status()>& run,
                           const std::function<void(const std::string&)>& leave) {
  std::atomic<bool> running{true};
  std::thread watcher([&] {
    while (g_signal == 0 && running) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!running) return;
    leave(std::string(g_signal.load() == SIGINT ? "SIGINT" : "SIGTERM") + " to moe-worker");
  });
  const moe::Status st = run();
  running = false;
  watcher.join();
  return st;
}

// A node agent: on SIGTERM it tells the controller, its ranks checkpoint at the next step boundary
// and stop (killed after the stop grace), and the job moves on without using a restart.
moe::Status RunAgent(const moe::worker::AgentOptions& o, const std::string& health_listen) {
  moe::worker::WorkerAgent agent(o);
  const Views views = [&agent] {
    const moe::worker::AgentOptions& a = agent.options();
    return std::vector<AgentView>{{a.name, a.node, a.rack, a.client.address, agent.State()}};
  };
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<HealthEndpoint> health, ServeHealth(health_listen, views));
  const moe::Status st = RunUntilSignal([&] { return agent.Run(); },
                                        [&](const std::string& why) { agent.Leave(why); });
  health.reset();  // before the agent its collector reads
  return st;
}

// Fake mode: `n` fake node agents on gRPC's callback API (fake_fleet.h).
moe::Status RunFleet(const moe::worker::AgentOptions& o, int n,
                     const moe::worker::FakeLayout& layout, const std::string& health_listen) {
  moe::worker::FakeFleet fleet(o, n, layout);
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<HealthEndpoint> health,
                       ServeHealth(health_listen, [&fleet] { return fleet.Views(); }));
  const moe::Status st = RunUntilSignal([&] { return fleet.Run(); },
                                        [&](const std::string& why) { fleet.Leave(why); });
  health.reset();
  return st;
}

std::string SelfDir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string p = n > 0 ? std::string(buf, static_cast<size_t>(n)) : ".";
  return p.substr(0, p.find_last_of('/'));
}

// moe-worker's command line: the agent's options and what only main uses.
struct WorkerFlags {
  moe::worker::AgentOptions o;
  std::string rack, node, inject_delay, token_file;
  std::string device = "cpu", devices;  // --device, --devices
  std::string health_listen;            // --health-listen ADDR:PORT
  int slots = 0;                        // --slots
  int slots_from_cores = 0;             // --slots defaulted from this many cores (logged)
  int host_cores = 0;                   // the host's, when some were held by other agents
  moe::worker::CoreClaim cores;         // the cores this agent counts as its own (cpu_cores.h)
  moe::ServiceLogOptions log;
  int fake_workers = 1;
  moe::worker::FakeLayout fake;
};

void BindConnectionFlags(CLI::App& app, WorkerFlags& f) {
  moe::worker::AgentOptions& o = f.o;
  const char* env_controller = std::getenv("MOE_CONTROLLER");
  const char* env_token = std::getenv("MOE_TOKEN");
  const char* env_token_file = std::getenv("MOE_TOKEN_FILE");
  f.token_file = env_token_file ? env_token_file : "";
  o.client.address = env_controller ? env_controller : "";
  o.client.token = env_token ? env_token : "";
  app.add_option("--controller", o.client.address,
                 "controller gRPC address host:port ($MOE_CONTROLLER); several, comma-separated, "
                 "for a leader and its standbys (moe-controller --store etcd://...): the agent "
                 "moves to the next when one refuses or cannot be reached");
  app.add_option(
      "--token", o.client.token,
      "bearer token with the worker role ($MOE_TOKEN; visible in ps: prefer --token-file)");
  app.add_option("--token-file", f.token_file,
                 "file holding the worker token, mode 0600 ($MOE_TOKEN_FILE)");
  app.add_option("--node-credential", f.o.node_credential_file,
                 "where this node's credential is kept (mode 0600): the worker token is exchanged "
                 "for it once, where the controller has tokens (default: "
                 "<runtime-dir>/node-<node>.credential)");
  app.add_option("--tls-ca", o.client.tls_ca, "CA of the controller's certificate (PEM): TLS");
  app.add_option("--tls-cert", o.client.tls_cert, "client certificate (PEM) for mTLS");
  app.add_option("--tls-key", o.client.tls_key, "client key (PEM) for mTLS");
}

void BindFlags(CLI::App& app, WorkerFlags& f) {
  moe::worker::AgentOptions& o = f.o;
  BindConnectionFlags(app, f);
  app.add_option("--device", f.device, "one device: cpu or cuda:N (a node of one device)")
      ->capture_default_str();
  app.add_option("--devices", f.devices,
                 "the node's GPUs this agent serves, one rank each: 0-7, 0,2,4, cuda:0,cuda:1 or "
                 "all (every GPU the driver lists)");
  app.add_option("--slots", f.slots,
                 "a CPU node: this many ranks at once, sharing the node's cores (default: the "
                 "node's cores no other agent on this host holds, over --threads; 1 without "
                 "--threads)")
      ->check(CLI::Range(1, 256));
  app.add_option("--rack", f.rack, "rack (NVLink domain) when NVML has no fabric info ($MOE_RACK)");
  app.add_option("--node", f.node, "node name ($MOE_NODE; default: the host name)");
  app.add_option("--name", o.name,
                 "agent name (default: <node>-cpu, <node>-gpuN for one GPU, <node> for several); "
                 "a node of N > 1 devices lists them as <name>/0 ... <name>/N-1");
  app.add_option("--address", o.address, "address this worker's rank is reachable at by its peers")
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "CPU threads for a rank (default: the node's cores shared among its CPU workers)");
  app.add_option("--stop-grace-seconds", o.stop_grace_seconds,
                 "a rank told to stop (cancel, SIGTERM to this worker) gets this long to reach its "
                 "next step "
                 "boundary and checkpoint, then it is killed: a step plus a checkpoint write")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--memory-gb", o.memory_gb,
                 "memory a rank may use, GB: the controller refuses jobs that need more (default: "
                 "cpu: the host's "
                 "memory shared among its CPU workers; cuda: not reported)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option(
      "--data-root", o.data_roots,
      "a job's spec.data.path must lie below one of these (relative: the first that holds it, "
      "else the directory this agent started in where that lies below one) "
      "(repeatable; default: $MOE_DATA_ROOT, else <runtime-dir>/data, and the directory it was "
      "started in when no root flag is given at all; / allows anywhere)");
  app.add_option(
      "--checkpoint-root", o.checkpoint_roots,
      "a job's checkpoint directory (relative: below the first) must lie below one of these "
      "(repeatable; default: $MOE_CHECKPOINT_ROOT, else <runtime-dir>/checkpoints and the "
      "controller's checkpoint root where it is mounted here; / allows anywhere)");
  app.add_option("--trainer", o.trainer, "path of moe-train (default: next to moe-worker)");
  app.add_option("--runtime-dir", o.runtime_dir,
                 "for job files and rendezvous sockets (default /tmp/moe-worker-<name>)");
  app.add_option("--inject-step-delay", f.inject_delay,
                 "testing: seconds each of this worker's ranks sleeps per step");
  app.add_option(
         "--fake-step-seconds", o.fake_step_seconds,
         "load testing: run no trainer; a rank reports a synthetic step every this many seconds")
      ->check(CLI::Range(0.001, 3600.0));
  app.add_option("--fake-workers", f.fake_workers,
                 "load testing (with --fake-step-seconds): this many node agents in one process, "
                 "each of --slots devices")
      ->check(CLI::Range(1, 100000));
  app.add_option("--fake-rack-size", f.fake.rack_size,
                 "load testing: the fake workers' racks hold this many each (0: one rack)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--fake-agents-per-connection", f.fake.per_connection,
                 "load testing: this many of the fake node agents share each TCP connection to the "
                 "controller (default 1: each its own, as real agents; more spares the connecting "
                 "side's threads and handshakes, not the controller's per-agent work)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--health-listen", f.health_listen,
                 "serve GET /healthz (alive), /readyz (registered with the controller) and "
                 "/metrics (moe_agent_*, process_*) on this address; :PORT binds the node's "
                 "--address (not every interface), e.g. :9401 (default: none)");
  moe::AddServiceLogFlags(app, &f.log);
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? v : fallback;
}

// The roots a job's paths must lie under. Without --data-root / --checkpoint-root a worker confines
// them to $MOE_DATA_ROOT / $MOE_CHECKPOINT_ROOT, else to data/ and checkpoints/ below its runtime
// directory (created), data also to the directory it was started in, and checkpoints also to the
// controller's checkpoint root where that is mounted here (agent.cc): a job may write anywhere only
// where the operator said so (--checkpoint-root /).
moe::Status ResolveRoots(moe::worker::AgentOptions& o) {
  if (o.runtime_dir.size() + 24 >
      107) {  // the ranks' rendezvous sockets: <runtime-dir>/rv-<16 hex>.sock
    return moe::InvalidArgumentError("--runtime-dir: " + o.runtime_dir +
                                     " is too long for a Unix socket path in it (" +
                                     std::to_string(o.runtime_dir.size()) + " bytes; at most 83)");
  }
  const bool data_default = o.data_roots.empty(), ckpt_default = o.checkpoint_roots.empty();
  if (data_default) o.data_roots = {EnvOr("MOE_DATA_ROOT", o.runtime_dir + "/data")};
  if (ckpt_default)
    o.checkpoint_roots = {EnvOr("MOE_CHECKPOINT_ROOT", o.runtime_dir + "/checkpoints")};
  // Neither the flag nor the variable: the controller's own checkpoint root is accepted too where
  // it is mounted here (agent.cc, AcceptCheckpointRoot), so default flags run a job naming none.
  o.default_checkpoint_roots = ckpt_default && std::getenv("MOE_CHECKPOINT_ROOT") == nullptr;
  char cwd[4096] = "/";
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) cwd[0] = '/', cwd[1] = 0;
  // A quick start (no root flag or variable at all) also reads the directory it was started in (it
  // runs from the project, where `make data` put data/fortunes), unless that is / (a service
  // manager's): reading is all a data root allows. An agent whose roots are configured in part
  // reads only what they say: a relative dataset lies below <runtime-dir>/data, and a job whose
  // dataset is not there fails at once (permanent), not on another directory's copy.
  const bool quick_start = data_default && ckpt_default &&
                           std::getenv("MOE_DATA_ROOT") == nullptr &&
                           std::getenv("MOE_CHECKPOINT_ROOT") == nullptr;
  if (quick_start && std::string(cwd) != "/") o.data_roots.push_back(cwd);
  for (auto* roots : {&o.data_roots, &o.checkpoint_roots}) {
    for (std::string& r : *roots) {
      MOE_RETURN_IF_ERROR(
          moe::CheckPathText(roots == &o.data_roots ? "--data-root" : "--checkpoint-root", r));
      r = moe::NormalizeAbsolute(r, cwd);
    }
  }
  if (data_default) MOE_RETURN_IF_ERROR(moe::MakeDirs(o.data_roots.front()));
  if (ckpt_default) MOE_RETURN_IF_ERROR(moe::MakeDirs(o.checkpoint_roots.front()));
  // A root that is not there (a shared file system not mounted yet) is an error now, not a
  // directory quietly made on the local disk where the next attempt elsewhere would not find its
  // checkpoints.
  for (const auto* roots : {&o.data_roots, &o.checkpoint_roots}) {
    for (const std::string& r : *roots) {
      if (!moe::PathExists(r)) {
        return moe::InvalidArgumentError(
            (roots == &o.data_roots ? "--data-root " : "--checkpoint-root ") + r +
            ": no such directory (mount or create it first)");
      }
    }
  }
  return moe::OkStatus();
}

// Anything-goes roots, said once in the log: a job may then read or write anywhere this user can.
void WarnOpenRoots(const moe::worker::AgentOptions& o) {
  for (const auto* roots : {&o.data_roots, &o.checkpoint_roots}) {
    for (const std::string& r : *roots) {
      if (r == "/") {
        MOE_LOG(WARNING) << (roots == &o.data_roots ? "--data-root /" : "--checkpoint-root /")
                         << ": jobs may read or write anywhere this worker's user can (workers "
                            "usually run as root)";
      }
    }
  }
  std::string d, c;
  for (const auto& r : o.data_roots) d += (d.empty() ? "" : ", ") + r;
  for (const auto& r : o.checkpoint_roots) c += (c.empty() ? "" : ", ") + r;
  MOE_LOG(INFO) << "jobs' data below " << d << "; checkpoints below " << c;
}

// Checks the flags and fills in the defaults that depend on others; INVALID_ARGUMENT names the
// flag.
moe::Status Resolve(WorkerFlags& f) {
  moe::worker::AgentOptions& o = f.o;
  if (!f.token_file.empty()) {
    MOE_ASSIGN_OR_RETURN(o.client.token, moe::ReadTokenFile(f.token_file));
  }
  if (o.client.address.empty())
    return moe::InvalidArgumentError("--controller: required (or set MOE_CONTROLLER)");
  // A CPU node without --slots runs as many ranks as its cores hold at --threads each (a node of 2
  // cores at --threads 1: 2 slots, so the two-rank default job runs on one agent), counting only
  // the cores no other agent on this host claimed (a second agent there gets 1 slot); without
  // --threads, one.
  if (f.slots == 0 && f.devices.empty() && f.device == "cpu" && o.threads > 0 &&
      o.fake_step_seconds <= 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    f.cores = moe::worker::CoreClaim::Take(cores);
    f.slots = std::clamp(f.cores.count() / o.threads, 1, 256);
    f.slots_from_cores = f.cores.count();
    if (f.cores.count() < cores) f.host_cores = cores;
  }
  MOE_ASSIGN_OR_RETURN(o.devices, moe::worker::ParseDevices(f.device, f.devices, f.slots));
  const std::string& first = o.devices.front();
  const moe::worker::Topology topo = moe::worker::DetectTopology(first, f.rack, f.node);
  o.rack = topo.rack;
  o.node = topo.node;
  f.rack = topo.source;  // said in the log once it is set up
  if (o.name.empty()) {
    o.name = first == "cpu"          ? o.node + "-cpu"
             : o.devices.size() == 1 ? o.node + "-gpu" + first.substr(5)
                                     : o.node;
  }
  if (o.trainer.empty()) o.trainer = SelfDir() + "/moe-train";
  if (f.fake_workers > 1 && o.fake_step_seconds <= 0) {
    return moe::InvalidArgumentError("--fake-workers: needs --fake-step-seconds (fake mode)");
  }
  if (f.fake.per_connection > 1 && moe::ControllerAddresses(o.client.address).size() > 1) {
    return moe::InvalidArgumentError(
        "--fake-agents-per-connection: needs one --controller address (agents sharing a "
        "connection cannot each move to another controller)");
  }
  if (f.fake.per_connection > 1 && f.fake_workers == 1) {
    return moe::InvalidArgumentError(
        "--fake-agents-per-connection: needs --fake-workers over 1 (fake mode's many agents)");
  }
  if (o.fake_step_seconds <= 0 && ::access(o.trainer.c_str(), X_OK) != 0) {
    return moe::InvalidArgumentError("--trainer: " + o.trainer +
                                     " is not an executable (build moe-train or pass --trainer)");
  }
  if (o.runtime_dir.empty()) o.runtime_dir = "/tmp/moe-worker-" + o.name;
  // :PORT: the node's own address, where its peers and the cluster's scraper reach it.
  if (f.health_listen.starts_with(":")) f.health_listen = o.address + f.health_listen;
  MOE_RETURN_IF_ERROR(ResolveRoots(o));
  if (!f.inject_delay.empty()) o.extra_trainer_args = {"--inject-step-delay", f.inject_delay};
  f.log.component = "worker " + o.name;
  return moe::InitServiceLog(f.log);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "moe-worker: the node agent that runs ranks of MoE training jobs on its devices for the "
      "controller"};
  WorkerFlags f;
  BindFlags(app, f);
  CLI11_PARSE(app, argc, argv);
  if (moe::Status st = Resolve(f); !st.ok()) {
    std::fprintf(stderr, "moe-worker: %s\n", st.message().c_str());
    return 2;
  }
  MOE_LOG(INFO) << "rack " << f.o.rack << " from " << f.rack << "; node " << f.o.node;
  if (f.host_cores > 0) {
    MOE_LOG(WARNING) << f.o.devices.size() << " CPU slot(s): other agents on this host hold "
                     << f.host_cores - f.slots_from_cores << " of its " << f.host_cores
                     << " cores, " << f.slots_from_cores << " left at --threads " << f.o.threads
                     << " each (--slots to choose)";
  } else if (f.slots_from_cores > 0) {
    MOE_LOG(INFO) << f.o.devices.size() << " CPU slot(s): the node's " << f.slots_from_cores
                  << " core(s) at --threads " << f.o.threads << " each (--slots to choose)";
  }
  WarnOpenRoots(f.o);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, OnSignal);
  ::signal(SIGTERM, OnSignal);
  if (f.o.fake_step_seconds > 0)
    MOE_LOG(INFO) << "fake mode: " << f.fake_workers << " node(s) of " << f.o.devices.size()
                  << " device(s), no trainer";
  const moe::Status st = f.o.fake_step_seconds > 0
                             ? RunFleet(f.o, f.fake_workers, f.fake, f.health_listen)
                             : RunAgent(f.o, f.health_listen);
  if (!st.ok()) {
    std::fprintf(stderr, "moe-worker: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
