// A checkpoint directory serves one job, and of it only the newest attempt
// (checkpoint/ownership.h).
#include "worker/engine/checkpoint/ownership.h"

#include <gtest/gtest.h>
#include <unistd.h>

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
  const OwnerClaim a{"a-12345", "a", "alice", 1, 1};
  ASSERT_TRUE(CheckpointOwnership::Claim(dir_, dir_, a).ok());
  auto other = CheckpointOwnership::Claim(dir_, dir_, OwnerClaim{"b-12345", "b", "alice", 1, 1});
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("belongs to job a-12345 (a, submitted by alice)"),
            std::string::npos)
      << other.status();
  EXPECT_EQ(CheckpointOwnership::Claim(dir_, dir_, OwnerClaim{"a-99999", "a", "mallory", 1, 1})
                .status()
                .code(),
            StatusCode::kFailedPrecondition)
      << "the same name from someone else is another job";
  EXPECT_TRUE(
      CheckpointOwnership::Claim(dir_, dir_, OwnerClaim{"a-99999", "a", "alice", 2, 1}).ok())
      << "the same name and owner: its resubmission";
}

TEST_F(OwnershipTest, ANewerAttemptFencesTheOlderOne) {
  auto first = CheckpointOwnership::Claim(dir_, dir_, OwnerClaim{"j-1", "j", "", 1, 1});
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->Check().ok());
  auto second = CheckpointOwnership::Claim(dir_, dir_, OwnerClaim{"j-1", "j", "", 1, 2});
  ASSERT_TRUE(second.ok()) << second.status();
  const Status fenced = first->Check();
  EXPECT_EQ(fenced.code(), StatusCode::kAborted) << fenced;
  EXPECT_NE(fenced.message().find("fenced"), std::string::npos);
  EXPECT_TRUE(second->Check().ok());
  // A stale attempt cannot take the directory back, whether by attempt or by epoch.
  EXPECT_EQ(
      CheckpointOwnership::Claim(dir_, dir_, OwnerClaim{"j-1", "j", "", 1, 1}).status().code(),
      StatusCode::kAborted);
  EXPECT_TRUE(CheckpointOwnership::Claim(dir_, dir_, OwnerClaim{"j-1", "j", "", 2, 1}).ok())
      << "a later controller's epoch comes first";
  EXPECT_EQ(second->Check().code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace moe
