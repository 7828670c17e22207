// The cores of this host a CPU agent may count as its own. An agent without --slots runs as many
// ranks as its cores hold at --threads each; several agents on one machine (a test rig, a node
// split by hand) would each count every core and oversubscribe them. So each claims the cores no
// other agent holds: a lock file per core (flock) in /dev/shm/moe-cpu-cores-<uid> (or the temporary
// directory), held for the agent's life and released by the kernel however it ends (kill -9
// included). Agents in separate containers see separate directories and their own CPU limits.
#pragma once

#include <string>
#include <vector>

namespace moe::worker {

class CoreClaim {
 public:
  CoreClaim() = default;
  // Claims up to `cores` cores that no other agent of this user holds; `dir` overrides where the
  // locks live (tests).
  static CoreClaim Take(int cores, const std::string& dir = "");
  CoreClaim(CoreClaim&& o) noexcept : fds_(std::move(o.fds_)) { o.fds_.clear(); }
  CoreClaim& operator=(CoreClaim&& o) noexcept;
  CoreClaim(const CoreClaim&) = delete;
  CoreClaim& operator=(const CoreClaim&) = delete;
  ~CoreClaim();

  int count() const { return static_cast<int>(fds_.size()); }

 private:
  void Release();
  std::vector<int> fds_;
};

}  // namespace moe::worker
