// The trainer's checkpoints: periodic and on-stop saves, synchronous or in the background, and what
// a failed save costs.
#include <chrono>
#include <cmath>
#include <new>
#include <thread>

#include "common/file_util.h"
#include "common/flops.h"
#include "common/log.h"
#include "common/path_roots.h"
#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "kernels/memory_stats.h"
#include "kernels/runtime.h"
#include "worker/engine/checkpoint/async_checkpoint.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/hf_io.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/model/model.h"
#include "worker/engine/train/evaluator.h"
#include "worker/engine/train/optimizer.h"
#include "worker/engine/train/peak.h"
#include "worker/engine/train/pipeline.h"
#include "worker/engine/train/trainer.h"
#include "worker/engine/train/trainer_internal.h"

namespace moe::train {

using internal::Clock;
using internal::Since;

Status Trainer::CheckpointOnStop(int64_t last_step) {
  // The save in flight first: committed, it may already be this boundary's.
  if (async_ && async_->in_flight())
    MOE_RETURN_IF_ERROR(FinishAsyncCheckpoint(last_step, /*wait=*/true));
  if (!checkpoints_ || last_step <= start_step_ || last_step == last_checkpoint_step_ ||
      !last_metrics_)
    return OkStatus();
  if (lead_) MOE_LOG(INFO) << "checkpointing step " << last_step << " before stopping";
  return SaveCheckpoint(last_step, *last_metrics_, /*sync=*/true);
}

Status Trainer::MaybeCheckpoint(int64_t step, const StepMetrics& m) {
  last_metrics_ = m;
  if (!checkpoints_) return OkStatus();
  const bool due =
      (checkpoint_interval_ > 0 && step % checkpoint_interval_ == 0) || step == stop_step_;
  // At most one save in flight: the next one (and the run's end) waits for it.
  if (async_ && async_->in_flight()) MOE_RETURN_IF_ERROR(FinishAsyncCheckpoint(step, due));
  if (!due) return OkStatus();
  return SaveCheckpoint(step, m, /*sync=*/step == stop_step_);
}

Status Trainer::FinishAsyncCheckpoint(int64_t step, bool wait) {
  const auto t0 = Clock::now();
  const int64_t saving = async_->in_flight_step();
  if (wait && lead_ && async_->in_flight() && !async_->write_done()) {
    MOE_LOG(INFO) << "checkpoint " << checkpoint::CheckpointManager::StepDirName(saving)
                  << " is still being written at step " << step
                  << ", where the next save (or the end) is due: waiting for it (one save in "
                     "flight at most)";
  }
  Status storage;
  MOE_ASSIGN_OR_RETURN(const checkpoint::AsyncCheckpointer::Outcome outcome,
                       async_->Poll(wait, *optimizer_, &storage));
  const double stalled = Since(t0);
  checkpoint_stall_ += stalled;
  if (outcome == checkpoint::AsyncCheckpointer::Outcome::kNone ||
      outcome == checkpoint::AsyncCheckpointer::Outcome::kPending)
    return OkStatus();
  ++result_.background_saves;
  result_.background_write_seconds += async_->last_write_seconds();
  if (outcome == checkpoint::AsyncCheckpointer::Outcome::kFailed)
    return CheckpointFailed(saving, storage);
  last_checkpoint_step_ = saving;
  if (lead_) {
    MOE_LOG(INFO) << "saved checkpoint " << checkpoint::CheckpointManager::StepDirName(saving)
                  << " in " << checkpoint_dir_ << " (written in the background in "
                  << async_->last_write_seconds() << " s; committed at step " << step << ", "
                  << stalled << " s of stall)";
  }
  return OkStatus();
}

Status Trainer::CheckpointFailed(int64_t step, const Status& storage) {
  // Storage trouble costs this checkpoint, not the run: every rank gave it up together and trains
  // on. The last one must be written, though: the rank fails (transient) and the job resumes and
  // retries.
  if (step == stop_step_)
    return UnavailableError("the final checkpoint could not be written: " + storage.message());
  ++checkpoints_skipped_;
  MOE_RETURN_IF_ERROR(ReopenCheckpoints());
  if (lead_) {
    MOE_LOG(WARNING) << "checkpoint at step " << step << " not written (" << storage.message()
                     << "); training goes on, "
                     << "the next try is at step "
                     << std::min(step + checkpoint_interval_, stop_step_) << " ("
                     << checkpoints_skipped_ << " skipped so far)";
  }
  return OkStatus();
}

Status Trainer::SaveCheckpoint(int64_t step, const StepMetrics& m, bool sync) {
  if (options_.on_protected) options_.on_protected(true);
  struct Done {  // a stop may cut the run again once the checkpoint is written (or failed)
    const std::function<void(bool)>& f;
    ~Done() {
      if (f) f(false);
    }
  } done{options_.on_protected};
  const auto c0 = Clock::now();
  Node state = Node::Map();
  state.Set("step", Node::Scalar(std::to_string(step)));
  state.Set("consumed_samples", Node::Scalar(std::to_string(m.consumed_samples)));
  state.Set("seed", Node::Scalar(std::to_string(spec_.training.seed)));
  state.Set("loss", Node::Scalar(std::to_string(m.loss)));
  Status storage;
  if (async_ && !sync) {
    MOE_RETURN_IF_ERROR(async_->Start(step, *model_, *optimizer_, state, &storage));
    checkpoint_stall_ += Since(c0);
    if (!storage.ok()) return CheckpointFailed(step, storage);
    if (lead_) {
      MOE_LOG(INFO) << "checkpoint " << checkpoint::CheckpointManager::StepDirName(step) << ": "
                    << async_->last_bytes() << " bytes copied to host memory in " << Since(c0)
                    << " s; written in the background while training goes on";
    }
    return OkStatus();
  }
  if (async_) MOE_RETURN_IF_ERROR(FinishAsyncCheckpoint(step, /*wait=*/true));
  MOE_RETURN_IF_ERROR(checkpoints_->Save(step, *model_, *optimizer_, state, &storage));
  checkpoint_stall_ += Since(c0);
  if (!storage.ok()) return CheckpointFailed(step, storage);
  last_checkpoint_step_ = step;
  if (lead_) {
    MOE_LOG(INFO) << "saved checkpoint " << checkpoint::CheckpointManager::StepDirName(step)
                  << " in " << checkpoint_dir_ << " (" << Since(c0) << " s)";
  }
  return OkStatus();
}

}  // namespace moe::train
