// A fixed pool of threads for the calls that may wait for the store (a change waits for its batch
// to be on disk): gRPC's callback threads must not block, so those calls run here and finish their
// reactor (or start the stream's next read) from here. Tasks run in the order posted, several at a
// time; a stream keeps its messages in order by posting the next only after the last is done.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moe::controller {

class Executor {
 public:
  explicit Executor(int threads);
  ~Executor();  // runs what is queued, then joins
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(std::function<void()> task);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace moe::controller
