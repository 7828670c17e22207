// Every setting of moe-controller with its default, written once. main.cc binds its flags to these
// members; the managers take the parts they use. Plain data: no gRPC here, so the managers and
// their tests include it freely.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/plan_profiles.h"
#include "common/service_log.h"
#include "controller/queues.h"

namespace moe::controller {

// The gRPC listener.
struct ServerOptions {
  std::string listen = "127.0.0.1:50051";
  std::string tls_cert, tls_key;  // PEM files: TLS on when both are set
  std::string tls_client_ca;      // PEM: also require and verify client certificates (mTLS)
  int max_message_bytes = 16 << 20;
  bool heartbeat_udp = true;  // agents' heartbeats by UDP datagram on the listener's port
  // gRPC server reflection (grpcurl's service listing), which answers without a token: on where
  // nothing needs one (no --tokens), else only with --grpc-reflection (main.cc).
  bool reflection = false;
};

// A rank whose compute time stays above the job's median by more than `margin` for `window`
// consecutive steps is a straggler (see metrics_aggregator.h).
struct StragglerOptions {
  double margin = 0.3;
  int window = 5;
};

struct ControllerConfig {
  // Serving.
  ServerOptions server;
  std::string metrics_listen = "127.0.0.1:9400";  // Prometheus /metrics
  std::string tokens_file;                        // bearer tokens; empty: no authentication
  bool allow_insecure_remote = false;             // listen beyond loopback without tokens
  bool allow_cleartext_tokens = false;  // tokens beyond loopback without TLS (they travel in clear)
  bool allow_remote_metrics = false;    // /metrics beyond loopback (it needs no token)
  ServiceLogOptions log;  // --log-level, --log-file, --log-format, ... (common/service_log.h)

  // State.
  // "sqlite" (the embedded default: state_dir) or etcd://host:port[,host:port...][/prefix]: the
  // records in etcd, one leader among the controllers on it (store_choice.h).
  std::string store = "sqlite";
  std::string advertise_address;         // what standbys tell clients to use (default: --listen)
  int leader_lease_seconds = 3;          // etcd: a leader silent this long is replaced
  std::string state_dir;                 // SQLite database (required with --store sqlite)
  bool allow_network_state_dir = false;  // NFS & co. refused unless set (CheckStateDirFilesystem)
  std::string
      checkpoint_root;  // checkpoints of jobs that name no directory: <root>/<job id>; see Resolve

  // Workers and attempts.
  double lease_seconds = 5.0;      // a worker silent for this long is lost
  double heartbeat_seconds = 1.0;  // what workers are told to send
  double reconnect_grace_seconds =
      10.0;  // after a restart, how long running ranks get to report back
  // A lost worker that has not come back in this long is forgotten (moectl get workers stops
  // listing it, MoEWorkerLost stops firing for it); 0 keeps lost workers until moectl delete
  // worker.
  double lost_worker_retention_seconds = 3600;
  // MoEJobGoodputLow fires for a job whose goodput over the last hour is below this (exported as
  // moe_goodput_floor: the alert rule compares against it).
  double goodput_floor = 0.8;
  // A device's mean time between failures, hours: GetJob advises each job's checkpoint interval
  // from it (0: no advice).
  double mtbf_hours = 0;
  double rank_start_seconds = 300;
  // Live workers (devices) at most: lost ones count toward no limit (they are bounded per node
  // below, and pruned with moectl delete workers --state lost). 262,144 covers 131,072 devices
  // twice over.
  size_t max_workers = 262144;
  // With tokens: node credentials at most (Bootstrap), and workers one node's credential may hold,
  // live and lost (its lost ones without a rank are forgotten, oldest first, to make room).
  size_t max_nodes = 65536;
  size_t max_devices_per_node = 1024;
  // A failed attempt's restart waits restart_backoff_seconds, doubling with each restart of the job
  // up to restart_backoff_max_seconds (Kubernetes' CrashLoopBackOff: 10 s, 20 s, 40 s, ... 300 s).
  // A clean requeue (a worker leaving, a drain) waits for nothing. 0: restart at once. A job of
  // more ranks than this is refused at submit (0: no ceiling). A smaller job that the workers
  // registered now cannot hold waits in PENDING for capacity, with the reason.
  int64_t max_job_ranks = 0;
  // Healthy workers of each rack (per device type) held back from new placements: a fresh job sees
  // a rack's free workers less this many; a restart that lost a worker may take them, its own
  // rack's first, so that an expert-parallel group stays in its NVLink domain (NVL72 operators
  // hold back 2 of 18 trays). 0: none held back.
  int spares_per_rack = 0;
  // A queued job that does not fit stops running jobs of lower priority to make room (they
  // checkpoint, wait as PREEMPTED and resume later without using a restart).
  bool preemption = true;
  // metadata.priority_class names: the priority a job of the class gets, and whether it may be
  // preempted.
  struct PriorityClass {
    int64_t priority = 0;
    bool preemptible = true;
  };
  std::map<std::string, PriorityClass> priority_classes;
  // Queues with quotas (--queues FILE, controller/queues.h); none: one unlimited queue, "default".
  QueuesConfig queues;
  double restart_backoff_seconds = 10;
  double restart_backoff_max_seconds = 300;
  // Finished jobs (and their events) older than this are deleted; 0 keeps them.
  double finished_job_retention_seconds = 30 * 24 * 3600;
  // Place jobs with a memory estimate on workers that report no memory
  // (--allow-workers-without-memory): off, such workers take only jobs the planner cannot estimate.
  bool allow_unknown_memory = false;
  // Start although the clock reads more than a week past the newest stored change.
  bool allow_clock_jump = false;

  // Planning (planner/planner.h): the cluster the workers are and the stack they run, to put each
  // attempt's planned step time next to the measured one. Unset: no plan.
  std::optional<ClusterProfile> plan_cluster;
  std::optional<SoftwareProfile> plan_software;
  // plan_cluster is this machine as moe-probe measured it (--plan-cluster local): a W-rank job's
  // device is one rank's share of it. A profile from a file is used as it is.
  bool plan_cluster_is_machine = false;

  // Metrics.
  double metrics_retention_seconds = 600;  // series of finished jobs stay this long on /metrics
  StragglerOptions straggler;

  // Defaults derived from other settings: the checkpoint root is <state_dir>/checkpoints unless
  // set.
  void Resolve() {
    if (checkpoint_root.empty() && !state_dir.empty()) checkpoint_root = state_dir + "/checkpoints";
  }
};

}  // namespace moe::controller
