// A directory opened beneath a root stays beneath it, whatever the path or the links on disk say.
#include "common/confined_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/path_roots.h"

namespace moe {
namespace {

class ConfinedDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = ::testing::TempDir() + "/confined-" + std::to_string(::getpid());
    ASSERT_TRUE(RemoveAll(base_).ok());
    root_ = base_ + "/root";
    ASSERT_TRUE(MakeDirs(root_ + "/a").ok());
    ASSERT_TRUE(MakeDirs(base_ + "/outside").ok());
    ASSERT_EQ(::symlink("a", (root_ + "/in").c_str()), 0);
    ASSERT_EQ(::symlink((base_ + "/outside").c_str(), (root_ + "/out").c_str()), 0);
    ASSERT_EQ(::symlink("../outside", (root_ + "/up").c_str()), 0);
  }
  void TearDown() override { (void)RemoveAll(base_); }
  std::string Real(const ConfinedDir& d) {
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(d.Path().c_str(), buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  std::string base_, root_;
};

TEST_F(ConfinedDirTest, OpensAndCreatesBeneathTheRoot) {
  auto d = ConfinedDir::Open("f", root_ + "/a/new/deeper", {root_}, /*create=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(PathExists(root_ + "/a/new/deeper"));
  ASSERT_TRUE(WriteFileAtomic((*d)->Path("x.txt"), "hi").ok());
  EXPECT_EQ(*ReadFileToString(root_ + "/a/new/deeper/x.txt"), "hi")
      << "written through the held directory";
  auto rel = ConfinedDir::Open("f", "a", {root_}, false);
  ASSERT_TRUE(rel.ok()) << "a relative path is below the first root";
}

TEST_F(ConfinedDirTest, LinksThatStayInsideAreFollowedOthersRefused) {
  auto in = ConfinedDir::Open("f", root_ + "/in", {root_}, false);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(Real(**in), NormalizeAbsolute(root_ + "/a", "/"));
  for (const char* escape : {"/out", "/up", "/out/x", "/up/x"}) {
    auto d = ConfinedDir::Open("spec.checkpoint.dir", root_ + escape, {root_}, /*create=*/true);
    ASSERT_FALSE(d.ok()) << escape;
    EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition) << d.status();
    EXPECT_NE(d.status().message().find("spec.checkpoint.dir"), std::string::npos);
  }
  EXPECT_FALSE(PathExists(base_ + "/outside/x")) << "nothing created outside";
}

TEST_F(ConfinedDirTest, DotDotAndSiblingsAndControlCharactersAreRefused) {
  EXPECT_EQ(ConfinedDir::Open("f", root_ + "/../outside", {root_}, true).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(ConfinedDir::Open("f", root_ + "2/x", {root_}, true).status().code(),
            StatusCode::kFailedPrecondition)
      << "a string prefix is not a component prefix";
  auto nul = ConfinedDir::Open("f", root_ + std::string("/a\0/../../outside", 18), {root_}, true);
  EXPECT_EQ(nul.status().code(), StatusCode::kInvalidArgument) << nul.status();
  EXPECT_EQ(ConfinedDir::Open("f", root_ + "/a\x1b[2J", {root_}, true).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ComponentsBelow, IsLexicalAndComponentWise) {
  bool under = false;
  EXPECT_EQ(ComponentsBelow("/r/a/../b/./c", "/r", &under), (std::vector<std::string>{"b", "c"}));
  EXPECT_TRUE(under);
  EXPECT_TRUE(ComponentsBelow("/r2/a", "/r", &under).empty());
  EXPECT_FALSE(under);
  EXPECT_TRUE(ComponentsBelow("/r", "/r/", &under).empty());
  EXPECT_TRUE(under);
}

}  // namespace
}  // namespace moe

TEST(ResolveRelativeData, FirstRootThatHoldsItThenTheWorkersDirectory) {
  std::set<std::string> there;
  const auto holds = [&](const std::string& p) { return there.count(p) > 0; };
  const std::vector<std::string> roots = {"/data", "/scratch/"};
  // Nowhere: empty, so the caller can say where it looked.
  EXPECT_EQ(moe::ResolveRelativeData("ds/x", roots, "/home/u/repo", holds), "");
  // In the worker's directory, outside every root: not chosen.
  there.insert("/home/u/repo/ds/x");
  EXPECT_EQ(moe::ResolveRelativeData("ds/x", roots, "/home/u/repo", holds), "");
  // ... and chosen where that lies below a root (a path written against a checkout, with
  // --data-root <checkout>/ds).
  EXPECT_EQ(moe::ResolveRelativeData("ds/x", {"/data", "/home/u/repo/ds"}, "/home/u/repo", holds),
            "/home/u/repo/ds/x");
  // Below a root: the roots come first, in their order.
  there.insert("/scratch/ds/x");
  EXPECT_EQ(moe::ResolveRelativeData("ds/x", roots, "/home/u/repo", holds), "/scratch/ds/x");
  there.insert("/data/ds/x");
  EXPECT_EQ(moe::ResolveRelativeData("./ds/../ds/x", roots, "/home/u/repo", holds), "/data/ds/x");
  // Absolute: normalized, and only where it says.
  EXPECT_EQ(moe::ResolveRelativeData("/data//ds/./x", roots, "", holds), "/data/ds/x");
  EXPECT_EQ(moe::ResolveRelativeData("/elsewhere/x", roots, "/home/u/repo", holds), "");
}

// On disk, as the agent checks a relative dataset and its rank opens it: the first root holding
// <path>.idx, not the first root (a rank opened below the first root only, until 2026-12-06), and
// nothing when no root holds it.
TEST(ResolveDatasetPath, TheFirstRootThatHoldsTheIndexOnDisk) {
  std::string base = ::testing::TempDir();  // "/tmp/": the results come back normalized
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  base += "/resolve-" + std::to_string(::getpid());
  for (const char* d : {"/a/ds", "/b/ds"}) ASSERT_EQ(::system(("mkdir -p " + base + d).c_str()), 0);
  ASSERT_TRUE(moe::WriteFileAtomic(base + "/b/ds/x.idx", "idx").ok());
  EXPECT_EQ(moe::ResolveDatasetPath("ds/x", {base + "/a", base + "/b"}), base + "/b/ds/x");
  ASSERT_TRUE(moe::WriteFileAtomic(base + "/a/ds/x.idx", "idx").ok());
  EXPECT_EQ(moe::ResolveDatasetPath("ds/x", {base + "/a", base + "/b"}), base + "/a/ds/x");
  EXPECT_EQ(moe::ResolveDatasetPath("ds/none", {base + "/a", base + "/b"}), "");
  ASSERT_EQ(::system(("rm -rf " + base).c_str()), 0);
}
