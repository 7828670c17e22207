// CoreClaim: agents on one host split its cores instead of each counting all of them; a claim ends
// with its holder (the kernel drops flock locks however a process ends).
#include "worker/agent/cpu_cores.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace moe::worker {
namespace {

// A scratch lock directory, removed with the test (its lock files outlive the claims).
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cpu-cores-test.XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  operator const std::string&() const { return path_; }  // NOLINT: read as the directory's path

 private:
  std::string path_;
};

TEST(CoreClaimTest, ASecondAgentGetsOnlyTheCoresTheFirstLeft) {
  const TempDir dir;
  CoreClaim first = CoreClaim::Take(2, dir);
  EXPECT_EQ(first.count(), 2);
  CoreClaim second = CoreClaim::Take(2, dir);
  EXPECT_EQ(second.count(), 0) << "both cores are held";
  CoreClaim wider = CoreClaim::Take(4, dir);
  EXPECT_EQ(wider.count(), 2) << "a larger count takes the cores nobody holds";
}

TEST(CoreClaimTest, TheCoresComeBackWhenTheirHolderEnds) {
  const TempDir dir;
  {
    CoreClaim held = CoreClaim::Take(2, dir);
    ASSERT_EQ(held.count(), 2);
    CoreClaim moved = std::move(held);
    EXPECT_EQ(moved.count(), 2);
    EXPECT_EQ(CoreClaim::Take(2, dir).count(), 0) << "a moved claim still holds its cores";
  }
  EXPECT_EQ(CoreClaim::Take(2, dir).count(), 2) << "released with the claim";
  // Another process that dies without cleaning up (SIGKILL) leaves nothing held.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    CoreClaim c = CoreClaim::Take(2, dir);
    const char n = static_cast<char>(c.count());
    (void)!::write(ready[1], &n, 1);
    ::pause();
    ::_exit(0);
  }
  char n = 0;
  ASSERT_EQ(::read(ready[0], &n, 1), 1);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(CoreClaim::Take(2, dir).count(), 0) << "the other process holds them";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(CoreClaim::Take(2, dir).count(), 2) << "the kernel released a killed holder's locks";
}

}  // namespace
}  // namespace moe::worker
