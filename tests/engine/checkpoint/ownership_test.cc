// A checkpoint directory serves one job, and of it only the newest attempt
// (checkpoint/ownership.h).
#include "worker/engine/checkpoint/ownership.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/file_util.h"

namespace moe {
namespace {

class OwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/ownership-" + std::to_string(::getpid());
    ASSERT_TRUE(RemoveAll(dir_).ok());
    ASSERT_TRUE(MakeDirs(dir_).ok());
  }
  void TearDown() override { (void)RemoveAll(dir_); }
  std::string dir_;
};

TEST_F(OwnershipTest, TheFirstJobOwnsItOthersAreRefusedItsResubmissionIsNot) {
  const checkpoint::OwnerClaim a{"a-12345", "a", "alice", 1, 1};
  ASSERT_TRUE(checkpoint::CheckpointOwnership::Claim(dir_, dir_, a).ok());
  auto other = checkpoint::CheckpointOwnership::Claim(
      dir_, dir_, checkpoint::OwnerClaim{"b-12345", "b", "alice", 1, 1});
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("belongs to job a-12345 (a, submitted by alice)"),
            std::string::npos)
      << other.status();
  EXPECT_EQ(checkpoint::CheckpointOwnership::Claim(
                dir_, dir_, checkpoint::OwnerClaim{"a-99999", "a", "mallory", 1, 1})
                .status()
                .code(),
            StatusCode::kFailedPrecondition)
      << "the same name from someone else is another job";
  EXPECT_TRUE(checkpoint::CheckpointOwnership::Claim(
                  dir_, dir_, checkpoint::OwnerClaim{"a-99999", "a", "alice", 2, 1})
                  .ok())
      << "the same name and owner: its resubmission";
}

TEST_F(OwnershipTest, ANewerAttemptFencesTheOlderOne) {
  auto first = checkpoint::CheckpointOwnership::Claim(dir_, dir_,
                                                      checkpoint::OwnerClaim{"j-1", "j", "", 1, 1});
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->Check().ok());
  auto second = checkpoint::CheckpointOwnership::Claim(
      dir_, dir_, checkpoint::OwnerClaim{"j-1", "j", "", 1, 2});
  ASSERT_TRUE(second.ok()) << second.status();
  const Status fenced = first->Check();
  EXPECT_EQ(fenced.code(), StatusCode::kAborted) << fenced;
  EXPECT_NE(fenced.message().find("fenced"), std::string::npos);
  EXPECT_TRUE(second->Check().ok());
  // A stale attempt cannot take the directory back, whether by attempt or by epoch.
  EXPECT_EQ(checkpoint::CheckpointOwnership::Claim(dir_, dir_,
                                                   checkpoint::OwnerClaim{"j-1", "j", "", 1, 1})
                .status()
                .code(),
            StatusCode::kAborted);
  EXPECT_TRUE(checkpoint::CheckpointOwnership::Claim(dir_, dir_,
                                                     checkpoint::OwnerClaim{"j-1", "j", "", 2, 1})
                  .ok())
      << "a later controller's epoch comes first";
  EXPECT_EQ(second->Check().code(), StatusCode::kAborted);
}

// A claim and a commit hold the owner lock: a newer attempt's claim (another process) that comes
// while the older attempt's commit is under way waits for it, so the commit never runs once the
// directory is someone else's (the claim and the check before the rename were read-then-write).
TEST_F(OwnershipTest, AClaimWaitsForACommitInProgressAndFencesWhatFollows) {
  const checkpoint::OwnerClaim first{"a-12345", "a", "alice", 1, 1};
  auto held = checkpoint::CheckpointOwnership::Claim(dir_, dir_, first);
  ASSERT_TRUE(held.ok()) << held.status();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the newer attempt, claiming while the commit below runs
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const bool ok = checkpoint::CheckpointOwnership::Claim(
                        dir_, dir_, checkpoint::OwnerClaim{"a-12345", "a", "alice", 1, 2})
                        .ok();
    ::_exit(ok ? 0 : 1);
  }
  int64_t seen = -1;
  const Status committed = held->WhileHeld([&]() -> Status {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the claim is waiting now
    auto marker = checkpoint::CheckpointOwnership::Read(dir_);
    seen = marker.ok() ? marker->attempt : -1;
    return OkStatus();
  });
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the newer claim failed";
  EXPECT_TRUE(committed.ok()) << committed;
  EXPECT_EQ(seen, 1) << "the newer claim landed in the middle of the commit";
  EXPECT_EQ(checkpoint::CheckpointOwnership::Read(dir_)->attempt, 2);
  EXPECT_EQ(held->WhileHeld([] { return OkStatus(); }).code(), StatusCode::kAborted)
      << "a commit after the newer claim";
}

}  // namespace
}  // namespace moe
