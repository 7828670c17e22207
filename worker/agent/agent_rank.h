// The agent's record of a rank it runs, shared by its session (agent.cc) and its rank runner
// (agent_ranks.cc); nothing else uses it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/rank_process.h"
#include "worker/agent/agent.h"
#include "worker/agent/rank_log.h"
#include "worker/agent/rendezvous_proxy.h"

namespace moe::worker {

struct WorkerAgent::Rank {
  moe::v1::Assignment assignment;
  int device = 0;    // its place in AgentOptions::devices
  std::string name;  // the worker (device) it runs on, as the controller calls it
  std::string tag;   // <job>-a<attempt>-r<rank>: file names and log prefix
  std::unique_ptr<RankProcess> process;
  std::unique_ptr<RendezvousProxy> proxy;
  std::string spec_path;
  std::atomic<bool> done{false};
  std::atomic<bool> fake_stop{false};  // fake mode: asked to stop (no process to signal)
  std::thread monitor;
  std::unique_ptr<RankLogWriter> log;  // its output, for moectl logs
};

}  // namespace moe::worker
