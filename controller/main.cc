// moe-controller: the composition root. Builds the managers, wires them, serves gRPC and /metrics.
//
//   moe-controller --listen ADDR --metrics-listen ADDR --state-dir DIR [--tls-cert F --tls-key F
//                  [--tls-client-ca F]] [--tokens FILE] [--lease-seconds S] [--checkpoint-root DIR]
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <thread>

#include "common/log.h"
#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/grpc_server.h"
#include "controller/metrics_aggregator.h"
#include "controller/state_store.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

bool IsLoopback(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr.rfind("localhost:", 0) == 0 || addr.rfind("[::1]:", 0) == 0 ||
         addr.rfind("unix:", 0) == 0;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "moe-controller: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moe-controller: schedules MoE training jobs onto rack-aware workers"};
  moe::controller::ServerOptions server;
  std::string metrics_listen = "127.0.0.1:9400", state_dir, tokens, log_level = "info", checkpoint_root;
  double lease = 5.0, grace = 10.0, retention = 600, straggler_margin = 0.3;
  int straggler_window = 5;
  bool insecure_remote = false;
  app.add_option("--listen", server.listen, "gRPC address (host:port)")->capture_default_str();
  app.add_option("--metrics-listen", metrics_listen, "Prometheus /metrics address (host:port)")->capture_default_str();
  app.add_option("--state-dir", state_dir, "directory of the durable state (SQLite)")->required();
  app.add_option("--tls-cert", server.tls_cert, "server certificate (PEM); TLS with --tls-key");
  app.add_option("--tls-key", server.tls_key, "server private key (PEM)");
  app.add_option("--tls-client-ca", server.tls_client_ca, "CA for client certificates (PEM): mutual TLS");
  app.add_option("--tokens", tokens, "bearer tokens file: '<token> <admin|viewer|worker> [name]' per line");
  app.add_flag("--allow-insecure-remote", insecure_remote, "listen beyond loopback without --tokens (not recommended)");
  app.add_option("--lease-seconds", lease, "a worker silent this long is lost")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--reconnect-grace-seconds", grace, "after a restart, how long running ranks get to report back")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-root", checkpoint_root, "checkpoints of jobs without spec.checkpoint.dir go to <root>/<job id> "
                                                       "(default <state-dir>/checkpoints; must be shared with the workers)");
  app.add_option("--metrics-retention-seconds", retention, "how long series of finished jobs stay on /metrics")->capture_default_str();
  app.add_option("--straggler-margin", straggler_margin, "flag a rank whose compute time exceeds the median by this fraction")
      ->capture_default_str();
  app.add_option("--straggler-window", straggler_window, "... for this many consecutive steps")->capture_default_str();
  app.add_option("--log-level", log_level, "debug | info | warning | error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  moe::LogLevel level;
  if (!moe::ParseLogLevel(log_level, &level)) return Fail("--log-level: unknown level '" + log_level + "'");
  moe::SetLogLevel(level);
  moe::SetLogPrefix("controller");
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, OnSignal);
  ::signal(SIGTERM, OnSignal);

  moe::controller::TokenAuth auth;
  if (!tokens.empty()) {
    auto loaded = moe::controller::TokenAuth::Load(tokens);
    if (!loaded.ok()) return Fail("--tokens: " + loaded.status().message());
    auth = *loaded;
  } else if (!IsLoopback(server.listen) && !insecure_remote) {
    return Fail("--listen " + server.listen + " is not a loopback address: without --tokens anyone could submit jobs; "
                "pass --tokens FILE (or --allow-insecure-remote)");
  }
  if (checkpoint_root.empty()) checkpoint_root = state_dir + "/checkpoints";

  auto store = moe::controller::SqliteStateStore::Open(state_dir);
  if (!store.ok()) return Fail("--state-dir: " + store.status().message());

  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(metrics_listen);
  } catch (const std::exception& e) {
    return Fail("--metrics-listen " + metrics_listen + ": cannot serve /metrics there (" + e.what() + ")");
  }
  exposer->RegisterCollectable(registry);

  moe::controller::RealClock clock;
  moe::controller::MetricsAggregator metrics(registry, clock, {straggler_margin, straggler_window}, retention, MOE_VERSION);
  moe::controller::ControllerOptions options;
  options.lease_seconds = lease;
  options.reconnect_grace_seconds = grace;
  options.checkpoint_root = checkpoint_root;
  moe::controller::Controller controller(**store, clock, metrics, options);
  if (moe::Status st = controller.Recover(); !st.ok()) return Fail("recovering state from " + state_dir + ": " + st.ToString());

  moe::controller::GrpcServer grpc_server(controller, auth);
  if (moe::Status st = grpc_server.Start(server); !st.ok()) return Fail("--listen: " + st.message());
  MOE_LOG(INFO) << "serving gRPC on " << server.listen << (server.tls_cert.empty() ? "" : " (TLS)")
                << (server.tls_client_ca.empty() ? "" : " (mTLS)") << (auth.enabled() ? ", tokens required" : "")
                << "; /metrics on " << metrics_listen << "; state in " << state_dir;
  while (!g_stop) {
    controller.Tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  MOE_LOG(INFO) << "shutting down";
  grpc_server.Shutdown();
  return 0;
}
