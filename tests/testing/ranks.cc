#include "tests/testing/ranks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "worker/engine/parallel/gloo_comm.h"
#include "worker/engine/parallel/process_group.h"

namespace moe::testing {

void RunRanks(int n, const std::function<void(int, parallel::KvStore*)>& fn) {
  static std::atomic<int> runs{0};
  const std::string dir =
      "/tmp/moe-ranks-test-" + std::to_string(::getpid()) + "-" + std::to_string(runs++);
  ASSERT_TRUE(RemoveAll(dir).ok());
  parallel::FileStore store(dir);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r, &store); });
  for (auto& t : threads) t.join();
  (void)RemoveAll(dir);
}

void RunGlooGroup(int n, const std::function<void(int, parallel::Communicator&)>& fn,
                  double timeout) {
  RunRanks(n, [&](int r, parallel::KvStore* store) {
    parallel::GroupOptions o;
    o.timeout_seconds = timeout;
    auto comm = parallel::CreateGlooCommunicator(r, n, store, o);
    ASSERT_TRUE(comm.ok()) << comm.status();
    // Every rank connected before any runs: a rank whose test body is a no-op (an empty buffer)
    // would otherwise close its side while a peer is still finishing Gloo's handshake ("Connection
    // closed by peer" in that peer's rendezvous, about 1 run in 12 of collectives_test).
    const Status ready = (*comm)->Barrier();
    ASSERT_TRUE(ready.ok()) << ready;
    fn(r, **comm);
  });
}

void RunAgainstHungPeer(const std::function<void(parallel::Communicator&)>& fn, double timeout) {
  const auto start = std::chrono::steady_clock::now();
  RunGlooGroup(
      2,
      [&](int r, parallel::Communicator& comm) {
        if (r == 1) {
          std::this_thread::sleep_for(std::chrono::duration<double>(2 * timeout));
          return;
        }
        fn(comm);
      },
      timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

}  // namespace moe::testing
