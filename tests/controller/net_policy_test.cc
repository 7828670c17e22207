// What the controller accepts at its edges: tokens files (mode, duplicates, comments, roles), the
// loopback test on parsed addresses, and the state directory's lock.
#include "controller/net_policy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "common/file_util.h"
#include "controller/auth.h"

namespace moe::controller {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/moe-net-policy-XXXXXX";
  return ::mkdtemp(tmpl);
}

std::string WriteTokens(const std::string& dir, const std::string& text, mode_t mode = 0600) {
  const std::string path = JoinPath(dir, "tokens");
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
  return path;
}

TEST(TokenAuth, AFileOthersMayReadIsRefused) {
  const std::string dir = TempDir();
  const std::string line = "admin-token-0123456789abcdef admin ops\n";
  auto loose = TokenAuth::Load(WriteTokens(dir, line, 0644));
  EXPECT_EQ(loose.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(loose.status().message().find("0644"), std::string::npos) << loose.status();
  EXPECT_EQ(TokenAuth::Load(WriteTokens(dir, line, 0660)).status().code(),
            StatusCode::kPermissionDenied)
      << "group-writable";
  EXPECT_TRUE(TokenAuth::Load(WriteTokens(dir, line, 0440)).ok())
      << "group-readable (a Kubernetes Secret)";
  EXPECT_TRUE(TokenAuth::Load(WriteTokens(dir, line, 0600)).ok());
  ASSERT_TRUE(RemoveAll(dir).ok());
}

TEST(TokenAuth, DuplicateAndMalformedLinesAreRefusedWithTheirNumber) {
  const std::string dir = TempDir();
  auto dup = TokenAuth::Load(
      WriteTokens(dir, "# ops\nabc-0123456789abcdef admin\nabc-0123456789abcdef viewer\n"));
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find(":3:"), std::string::npos) << dup.status();
  auto extra = TokenAuth::Load(WriteTokens(dir, "abc-0123456789abcdef admin ops extra\n"));
  EXPECT_NE(extra.status().message().find(":1:"), std::string::npos) << extra.status();
  ASSERT_TRUE(RemoveAll(dir).ok());
}

TEST(TokenAuth, AHashInsideATokenIsPartOfItAndAdminIsNoWorker) {
  const std::string dir = TempDir();
  auto auth = TokenAuth::Load(WriteTokens(
      dir, "# a comment line\nab#cd-0123456789abcdef admin\nwk-0123456789abcdef worker\n"));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE(auth->Check("Bearer ab#cd-0123456789abcdef", Role::kAdmin).ok());
  EXPECT_EQ(auth->Check("Bearer ab", Role::kViewer).code(), StatusCode::kUnauthenticated)
      << "not truncated at '#'";
  EXPECT_TRUE(auth->Check("Bearer ab#cd-0123456789abcdef", Role::kViewer).ok()) << "admin may read";
  EXPECT_EQ(auth->Check("Bearer ab#cd-0123456789abcdef", Role::kWorker).code(),
            StatusCode::kPermissionDenied)
      << "an admin token is not a worker credential";
  EXPECT_TRUE(auth->Check("Bearer wk-0123456789abcdef", Role::kWorker).ok());
  EXPECT_EQ(auth->Check("Bearer wk-0123456789abcdef", Role::kAdmin).code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(RemoveAll(dir).ok());
}

TEST(TokenAuth, SecretsCompareWholeWithoutAnEarlyExit) {
  EXPECT_TRUE(SameSecret("abcdef", "abcdef"));
  EXPECT_FALSE(SameSecret("abcdef", "abcdeg"));  // the last byte differs
  EXPECT_FALSE(SameSecret("abcdef", "xbcdef"));  // the first
  EXPECT_FALSE(SameSecret("abcdef", "abcde"));   // a prefix
  EXPECT_FALSE(SameSecret("abc", std::string("abc\0", 4)));
  EXPECT_TRUE(SameSecret("", ""));
  // Constant time is the loop's shape (every byte, no early exit), which tests cannot time; this
  // checks that a difference anywhere in a long secret is still found.
  const std::string a(1 << 16, 'k');
  std::string b = a;
  b.back() = 'x';
  EXPECT_FALSE(SameSecret(a, b));
  b = a;
  b.front() = 'x';
  EXPECT_FALSE(SameSecret(a, b));
}

TEST(NetPolicy, LoopbackIsDecidedOnTheParsedAddress) {
  for (const char* yes :
       {"127.0.0.1:50051", "127.1.2.3:9", "localhost:9400", "[::1]:50051", "unix:/tmp/s"}) {
    EXPECT_TRUE(IsLoopbackAddress(yes)) << yes;
  }
  for (const char* no :
       {"127.evil.example:50051", "0.0.0.0:9400", "10.0.0.1:1", "[::]:50051", "[::ffff:10.0.0.1]:1",
        "localhost.evil.example:1", "127.0.0.1.nip.io:1", ":50051", "[::1:50051"}) {
    EXPECT_FALSE(IsLoopbackAddress(no)) << no;
  }
}

TEST(NetPolicy, OneProcessHoldsAStateDirectory) {
  const std::string dir = TempDir();
  {
    auto mine = LockStateDir(dir);
    ASSERT_TRUE(mine.ok()) << mine.status();
    // Another process (flock locks belong to the open file, so a child opening it again competes).
    const pid_t child = ::fork();
    if (child == 0) {
      auto theirs = LockStateDir(dir);
      const bool named =
          !theirs.ok() && theirs.status().code() == StatusCode::kFailedPrecondition &&
          theirs.status().message().find("pid " + std::to_string(::getppid())) != std::string::npos;
      ::_exit(named ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the second holder is refused, naming our pid";
  }  // the lock's destructor closes both descriptors
  auto again = LockStateDir(dir);
  EXPECT_TRUE(again.ok()) << "free once the holder is gone: " << again.status();
  ASSERT_TRUE(RemoveAll(dir).ok());
}

// A hard link of the database in a second state directory is the same file: the second controller
// finds its lock held (the directory locks alone are two different directories), and a database
// with a second name is refused even when nobody holds it.
TEST(NetPolicy, AHardLinkedDatabaseIsRefused) {
  const std::string first = TempDir(), second = TempDir();
  {
    auto mine = LockStateDir(first);
    ASSERT_TRUE(mine.ok()) << mine.status();
    // The store creates the database after the directory's lock; its own lock follows.
    ASSERT_TRUE(WriteFileAtomic(JoinPath(first, "controller.db"), "SQLite format 3").ok());
    ASSERT_TRUE(mine->LockDatabase().ok());
    ASSERT_EQ(
        ::link(JoinPath(first, "controller.db").c_str(), JoinPath(second, "controller.db").c_str()),
        0);
    auto theirs = LockStateDir(second);
    ASSERT_FALSE(theirs.ok()) << "two controllers on one database through a hard link";
    EXPECT_EQ(theirs.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(theirs.status().message().find("2 hard links"), std::string::npos) << theirs.status();
  }
  auto alone = LockStateDir(first);  // nobody holds it now, but it still has two names
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("2 hard links"), std::string::npos) << alone.status();
  ASSERT_EQ(::unlink(JoinPath(second, "controller.db").c_str()), 0);
  EXPECT_TRUE(LockStateDir(first).ok()) << "one name again: free";
  ASSERT_TRUE(RemoveAll(first).ok());
  ASSERT_TRUE(RemoveAll(second).ok());
}

// The database's own lock: a second process that gets past the directory (another directory whose
// database is the same file, as a bind mount would make it) finds it held.
TEST(NetPolicy, TheDatabaseFileIsLockedItself) {
  const std::string dir = TempDir();
  auto mine = LockStateDir(dir);
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "controller.db"), "SQLite format 3").ok());
  ASSERT_TRUE(mine->LockDatabase().ok());
  const int fd = ::open(JoinPath(dir, "controller.db").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0) << "held by the lock";
  ::close(fd);
  ASSERT_TRUE(RemoveAll(dir).ok());
}

TEST(NetPolicy, NetworkFileSystemsAreNamedByTheirMagic) {
  EXPECT_EQ(NetworkFilesystemName(0x6969), "nfs");
  EXPECT_EQ(NetworkFilesystemName(0xFF534D42), "cifs");
  EXPECT_EQ(NetworkFilesystemName(0xFE534D42), "smb2");
  EXPECT_EQ(NetworkFilesystemName(0x5346414F), "afs");
  // Local disks, tmpfs and the parallel file systems whose locks SQLite can use are not refused.
  for (int64_t ok : {0xEF53 /* ext4 */, 0x58465342 /* xfs */, 0x01021994 /* tmpfs */,
                     0x01021997 /* 9p: VMs' shared folders */, 0x0BD00BD0 /* lustre */,
                     0x47504653 /* gpfs */, 0x19830326 /* beegfs */}) {
    EXPECT_EQ(NetworkFilesystemName(ok), "") << std::hex << ok;
  }
}

TEST(NetPolicy, AStateDirectoryOnALocalDiskOrNotYetMadeIsAccepted) {
  const std::string dir = TempDir();
  EXPECT_TRUE(CheckStateDirFilesystem(dir, false).ok());
  // Not there yet: its nearest existing parent decides.
  EXPECT_TRUE(CheckStateDirFilesystem(dir + "/not/yet/made", false).ok());
  EXPECT_TRUE(CheckStateDirFilesystem(dir, true).ok());
  ASSERT_TRUE(RemoveAll(dir).ok());
}

}  // namespace
}  // namespace moe::controller
