// Who may write a checkpoint directory: the job that first used it, and of that job only its newest
// attempt. A marker in the directory, `.moe-owner.json`, names the job (id, name, the submitter)
// and the attempt that holds it: the controller's fencing epoch, then the attempt number. An
// attempt's rank 0 claims the directory when it starts (docs/operations.md, "Paths, ownership and
// fencing"):
//   - no marker: the directory is this job's from now on;
//   - another job's marker: refused (FAILED_PRECONDITION), unless it names the same job name and
//     submitter (a resubmission of a job the controller no longer holds);
//   - an older attempt's marker: this attempt takes it over (the older one is fenced from then on);
//   - a newer attempt's marker: this rank is stale (ABORTED).
// Before every commit, prune and metrics line the holder checks again (Check): a rank whose attempt
// was replaced while it kept running (its worker stopped, the job restarted elsewhere) commits and
// deletes nothing. A claim (read, then write the marker) and a commit (check, then rename and
// prune: WhileHeld) each hold `.moe-owner.lock` (a POSIX record lock: NFS and Lustre honour it), so
// that no claim slips in between the read and the write, nor between a commit's check and its
// rename.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace moe::checkpoint {

struct OwnerClaim {
  std::string job;    // the job id
  std::string name;   // metadata.name
  std::string owner;  // who submitted it (the token's name; "" without authentication)
  int64_t epoch = 0;  // the controller's fencing epoch
  int64_t attempt = 0;

  // Whether this claim is older than `other` (epoch first, then attempt).
  bool OlderThan(const OwnerClaim& other) const {
    return epoch != other.epoch ? epoch < other.epoch : attempt < other.attempt;
  }
};

inline constexpr char kOwnerMarker[] = ".moe-owner.json";

class CheckpointOwnership {
 public:
  // Claims `dir` (a path that reaches the directory: ConfinedDir::Path()) for `me`, as above;
  // `shown` names it in messages.
  static StatusOr<CheckpointOwnership> Claim(const std::string& dir, const std::string& shown,
                                             const OwnerClaim& me);
  // Reads the marker of `dir`; NOT_FOUND when there is none.
  static StatusOr<OwnerClaim> Read(const std::string& dir);

  // OK while the marker still names this attempt; ABORTED (this rank is fenced) when a newer
  // attempt or another job holds the directory now.
  Status Check() const;
  // Runs `fn` (a commit) if this attempt still holds the directory, with the owner lock held
  // throughout: no newer claim can land between the check and what `fn` does.
  Status WhileHeld(const std::function<Status()>& fn) const;
  const OwnerClaim& claim() const { return me_; }

 private:
  CheckpointOwnership(std::string dir, std::string shown, OwnerClaim me)
      : dir_(std::move(dir)), shown_(std::move(shown)), me_(std::move(me)) {}
  std::string dir_, shown_;
  OwnerClaim me_;
};

}  // namespace moe::checkpoint
