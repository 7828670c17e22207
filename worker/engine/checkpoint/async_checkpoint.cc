#include "worker/engine/checkpoint/async_checkpoint.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/log.h"
#include "kernels/pinned_host.h"

namespace moe::checkpoint {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// MOE_TEST_CHECKPOINT_WRITE_FAULT=kill|error:<step>[:<rank>]: what the writer does after the
// first chunk of that step's shard (nothing when unset, for another step or another rank).
std::function<Status()> FaultFor(int64_t step, int rank) {
  const char* env = std::getenv("MOE_TEST_CHECKPOINT_WRITE_FAULT");
  if (env == nullptr) return nullptr;
  const std::string spec = env;
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return nullptr;
  const std::string target = spec.substr(colon + 1);
  if (target != std::to_string(step) && target != std::to_string(step) + ":" + std::to_string(rank))
    return nullptr;
  const std::string kind = spec.substr(0, colon);
  if (kind == "kill") {
    return [] {
      MOE_LOG(WARNING) << "MOE_TEST_CHECKPOINT_WRITE_FAULT: killing this process mid-write";
      std::raise(SIGKILL);
      return OkStatus();
    };
  }
  return [] {
    return UnavailableError("injected checkpoint write failure (MOE_TEST_CHECKPOINT_WRITE_FAULT)");
  };
}

}  // namespace

AsyncCheckpointer::AsyncCheckpointer(CheckpointManager* manager,
                                     const parallel::ParallelContext& par)
    : manager_(manager), par_(par) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();  // the loop finishes a job it holds before it quits
  }
  FreeArena();
}

void AsyncCheckpointer::FreeArena() {
  if (arena_ == nullptr) return;
  if (pinned_)
    kernels::FreePinnedHost(arena_);
  else
    ::operator delete(arena_);
  arena_ = nullptr;
  capacity_ = 0;
}

// One arena for every piece, kept between saves (the same state has the same size every time).
void AsyncCheckpointer::Reserve(size_t bytes, bool device_tensors) {
  if (bytes <= capacity_ && arena_ != nullptr) return;
  FreeArena();
  const size_t want = bytes == 0 ? 1 : bytes;
  pinned_ = false;
  if (device_tensors) arena_ = static_cast<char*>(kernels::AllocPinnedHost(want));
  if (arena_ != nullptr) {
    pinned_ = true;
  } else {
    arena_ = static_cast<char*>(::operator new(want));
  }
  capacity_ = want;
}

namespace {

size_t TotalBytes(const std::vector<TensorPiece>& pieces, bool* device_tensors) {
  size_t total = 0;
  *device_tensors = false;
  for (const TensorPiece& p : pieces) {
    total += p.data.nbytes();
    *device_tensors = *device_tensors || !p.data.device().is_cpu();
  }
  return total;
}

}  // namespace

void AsyncCheckpointer::Preallocate(model::Model& model, const CheckpointedOptimizer& optimizer) {
  bool device_tensors = false;
  const size_t total =
      TotalBytes(CheckpointPieces(model, optimizer, par_, /*writer=*/true), &device_tensors);
  Reserve(total, device_tensors);
  if (!pinned_) std::memset(arena_, 0, capacity_);  // its pages faulted in now, not at a save
}

void AsyncCheckpointer::Snapshot(model::Model& model, const CheckpointedOptimizer& optimizer) {
  const std::vector<TensorPiece> mine = CheckpointPieces(model, optimizer, par_, /*writer=*/true);
  bool device_tensors = false;
  Reserve(TotalBytes(mine, &device_tensors), device_tensors);
  pieces_.clear();
  size_t at = 0;
  for (const TensorPiece& p : mine) {
    const size_t n = p.data.nbytes();
    if (p.data.device().is_cpu())
      std::memcpy(arena_ + at, p.data.raw(), n);
    else  // waits for the kernels queued before it: the state after the step's update
      GetAllocator(p.data.device())->CopyToHost(arena_ + at, p.data.raw(), n);
    pieces_.push_back(
        {p.name, p.global_shape, p.begin, p.data.numel(), p.data.dtype(), arena_ + at});
    at += n;
  }
  last_bytes_ = at;
}

Status AsyncCheckpointer::Start(int64_t step, model::Model& model,
                                const CheckpointedOptimizer& optimizer, const Node& state,
                                Status* storage_failure) {
  MOE_CHECK(!pending_) << "a checkpoint save started while the one of step " << pending_->step
                       << " is in flight";
  Status prepared;
  MOE_RETURN_IF_ERROR(manager_->BeginSave(step, &prepared));
  if (!prepared.ok()) {  // every rank gives it up together, as Save does
    Status failure;
    MOE_RETURN_IF_ERROR(manager_->EndSave(step, optimizer, state, prepared, prepared, &failure));
    *storage_failure = failure.ok() ? prepared : failure;
    return OkStatus();
  }
  Snapshot(model, optimizer);
  pending_ = Pending{step, state, prepared};
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = true;
    done_ = false;
    job_path_ = manager_->ShardPath(step);
    job_step_ = step;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { WriterLoop(); });
  cv_.notify_all();
  return OkStatus();
}

Status AsyncCheckpointer::Write(const std::string& path, int64_t step) {
  if (pieces_.empty()) return OkStatus();  // this rank writes nothing (not a writing rank)
  return WriteShardFileFromHost(path, par_.rank, step, pieces_, FaultFor(step, par_.rank));
}

void AsyncCheckpointer::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return job_ || quit_; });
    if (!job_) return;  // quit_ with nothing to write
    const std::string path = job_path_;
    const int64_t step = job_step_;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    Status st = Write(path, step);
    const double took = Seconds(t0);
    lock.lock();
    wrote_ = st;
    write_seconds_ = took;
    job_ = false;
    done_ = true;
    cv_.notify_all();
  }
}

bool AsyncCheckpointer::write_done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status AsyncCheckpointer::WaitForWriter() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  last_write_seconds_ = write_seconds_;
  return wrote_;
}

StatusOr<AsyncCheckpointer::Outcome> AsyncCheckpointer::Poll(bool wait,
                                                             const CheckpointedOptimizer& optimizer,
                                                             Status* storage_failure) {
  if (!pending_) return Outcome::kNone;
  if (!wait) {
    double running = write_done() ? 0.0 : 1.0;
    par_.world->SetPhase("checkpoint at step " + std::to_string(pending_->step) +
                         ": are the background writes done");
    MOE_RETURN_IF_ERROR(par_.world->AllReduceSumHost(&running, 1));
    if (running > 0) return Outcome::kPending;
  }
  const Status wrote = WaitForWriter();
  const Pending p = std::move(*pending_);
  pending_.reset();
  Status failure;
  MOE_RETURN_IF_ERROR(manager_->EndSave(p.step, optimizer, p.state, p.prepared, wrote, &failure));
  if (!failure.ok()) {
    *storage_failure = failure;
    return Outcome::kFailed;
  }
  return Outcome::kCommitted;
}

}  // namespace moe::checkpoint
