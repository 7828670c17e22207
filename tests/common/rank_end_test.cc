// Exit codes, failure classes and the final record of common/rank_end.h.
#include "common/rank_end.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(RankEndTest, ClassesAndExitCodesFollowTheStatus) {
  EXPECT_EQ(RankEndFor(OkStatus()).exit_code(), kExitOk);
  EXPECT_EQ(RankEndFor(InvalidArgumentError("x")).failure_class, FailureClass::kPermanent);
  EXPECT_EQ(RankEndFor(InvalidArgumentError("x")).exit_code(), kExitBadInput);
  EXPECT_EQ(RankEndFor(FailedPreconditionError("x")).exit_code(), kExitCannotRun);
  EXPECT_EQ(RankEndFor(CancelledError("x")).exit_code(), kExitStopped);
  EXPECT_EQ(RankEndFor(UnavailableError("peer lost")).failure_class, FailureClass::kTransient);
  // A full disk (ENOSPC is RESOURCE_EXHAUSTED) may clear: transient. Out of memory at
  // initialisation is reported as FAILED_PRECONDITION (the same layout on the same device would hit
  // it again).
  EXPECT_EQ(RankEndFor(ResourceExhaustedError("no space left on device")).failure_class,
            FailureClass::kTransient);
  EXPECT_EQ(RankEndFor(DeadlineExceededError("timeout")).exit_code(), kExitTransient);
  for (int code : {kExitOk, kExitTransient, kExitBadInput, kExitStopped, kExitCannotRun}) {
    EXPECT_EQ(RankEndForExitCode(code, "m").exit_code(), code);
  }
}

TEST(RankEndTest, TheRecordRoundTripsThroughJson) {
  const RankEnd in = RankEndFor(FailedPreconditionError("dataset \"x\" has vocab 32000\nnot 2048"));
  const std::string line = RankEndJson(in);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(line.rfind("{\"end\":", 0), 0u);
  auto doc = ParseYaml(line);
  ASSERT_TRUE(doc.ok()) << doc.status();
  auto out = ParseRankEnd(*doc);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->code, in.code);
  EXPECT_EQ(out->failure_class, in.failure_class);
  EXPECT_EQ(out->message, in.message);
  EXPECT_EQ(out->checkpoint_step, 0);
}

TEST(RankEndTest, TheRecordCarriesTheCheckpointStep) {
  RankEnd in = StoppedRankEnd("stopped after step 12 (asked to stop)");
  in.checkpoint_step = 12;
  auto doc = ParseYaml(RankEndJson(in));
  ASSERT_TRUE(doc.ok()) << doc.status();
  auto out = ParseRankEnd(*doc);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->failure_class, FailureClass::kStopped);
  EXPECT_EQ(out->checkpoint_step, 12);
  auto odd = ParseYaml(R"({"end":true,"code":"OK","class":"none","checkpoint_step":"x"})");
  ASSERT_TRUE(odd.ok());
  auto lenient = ParseRankEnd(*odd);
  ASSERT_TRUE(lenient.ok()) << "informational: an unreadable step still says how the rank ended";
  EXPECT_EQ(lenient->checkpoint_step, 0);
}

TEST(RankEndTest, AStepReportIsNotARecordAndBadRecordsAreRefused) {
  auto step = ParseYaml("{\"step\": 3, \"loss\": 2.5}");
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(ParseRankEnd(*step).status().code(), StatusCode::kNotFound);
  auto bad = ParseYaml("{\"end\": true, \"code\": \"NOPE\", \"class\": \"permanent\"}");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(ParseRankEnd(*bad).status().code(), StatusCode::kInvalidArgument);
  auto bad_class = ParseYaml("{\"end\": true, \"code\": \"INTERNAL\", \"class\": \"sometimes\"}");
  ASSERT_TRUE(bad_class.ok());
  EXPECT_NE(ParseRankEnd(*bad_class).status().message().find("sometimes"), std::string::npos);
}

}  // namespace
}  // namespace moe
