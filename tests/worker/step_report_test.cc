// The rank's JSON step report as the worker agent reads it (worker/agent/step_report.cc).
#include "worker/agent/step_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "worker/agent/rank_log.h"

namespace moe::worker {
namespace {

TEST(StepReport, ReadsTheFieldsARankWrites) {
  moe::v1::StepMetrics m;
  ASSERT_TRUE(
      StepMetricsFromJson(
          R"({"step": 3, "total_steps": 10, "loss": 4.5, "tokens": 2048, "memory_peak_bytes": 1e6})",
          &m)
          .ok());
  EXPECT_EQ(m.step(), 3);
  EXPECT_EQ(m.total_steps(), 10);
  EXPECT_EQ(m.loss(), 4.5);
  EXPECT_EQ(m.tokens(), 2048);
  EXPECT_EQ(m.memory_peak_bytes(), 1000000);
}

TEST(StepReport, ReadsTheStallsOfCheckpointsAndEvaluation) {
  moe::v1::StepMetrics m;
  ASSERT_TRUE(
      StepMetricsFromJson(R"({"step": 5, "checkpoint_step": 4, "checkpoint_stall_seconds": 0.25,)"
                          R"( "eval_seconds": 1.5})",
                          &m)
          .ok());
  EXPECT_EQ(m.checkpoint_step(), 4);
  EXPECT_EQ(m.checkpoint_stall_seconds(), 0.25);
  EXPECT_EQ(m.eval_seconds(), 1.5);
  moe::v1::StepMetrics none;
  ASSERT_TRUE(StepMetricsFromJson(R"({"step": 6})", &none).ok());
  EXPECT_EQ(none.checkpoint_stall_seconds(), 0);
  EXPECT_EQ(none.eval_seconds(), 0);
}

// fuzz_step_report's crash (tests/fuzz/regressions/fuzz_step_report): a count past int64 was cast
// from double, which is undefined behaviour; now the report is refused and the field named.
TEST(StepReport, ACountPastInt64IsRefusedNotCast) {
  for (const char* bad :
       {R"({"step": 1, "memory_peak_bytes": 23155490090100000007})", R"({"tokens": 1e300})",
        R"({"step": 1.5})", R"({"total_steps": "many"})"}) {
    moe::v1::StepMetrics m;
    const Status st = StepMetricsFromJson(bad, &m);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("expected an integer"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace moe::worker

namespace moe::worker {
namespace {

TEST(RankLog, TailOffsetsPartialLinesAndRotation) {
  char tmpl[] = "/tmp/moe-ranklog-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string path = RankLogPath(tmpl, "job-1", 2, 3);
  EXPECT_EQ(path, std::string(tmpl) + "/logs/job-1/a2-r3.log");
  EXPECT_EQ(ReadRankLog(path, 0, 0).status().code(), StatusCode::kNotFound);
  {
    RankLogWriter w(path, /*rotate_bytes=*/40);
    for (const char* line : {"one", "two", "three", "four"}) w.Append(line);
    auto all = ReadRankLog(path, 0, 0);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(all->text, "one\ntwo\nthree\nfour\n");
    auto tail = ReadRankLog(path, 0, 2);
    ASSERT_TRUE(tail.ok());
    EXPECT_EQ(tail->text, "three\nfour\n");
    EXPECT_EQ(tail->next_offset, all->next_offset);
    auto more = ReadRankLog(path, all->next_offset, 0);
    ASSERT_TRUE(more.ok());
    EXPECT_EQ(more->text, "") << "nothing new";
    w.Append("a line long enough to pass the 40 bytes");  // rotates: the old part becomes .1
    auto after = ReadRankLog(path, all->next_offset, 0);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->text, "a line long enough to pass the 40 bytes\n")
        << "the offset follows across the rotation";
    EXPECT_EQ(after->next_offset, all->next_offset + 40);
    EXPECT_EQ(ReadRankLog(path, 5, 0)->text, "a line long enough to pass the 40 bytes\n")
        << "rotated away: from the start";
    EXPECT_TRUE(ReadRankLog(path + ".1", 0, 0).ok());
  }
  std::FILE* f = std::fopen(path.c_str(), "a");
  std::fputs("partial", f);
  std::fclose(f);
  auto partial = ReadRankLog(path, 0, 0);
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->text, "a line long enough to pass the 40 bytes\n")
      << "a line without its end waits";
  EXPECT_EQ(std::system(("rm -rf " + std::string(tmpl)).c_str()), 0);
}

}  // namespace
}  // namespace moe::worker
