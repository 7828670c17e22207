// The rank's JSON step report as the worker agent reads it (worker/step_report.cc).
#include "worker/step_report.h"

#include <gtest/gtest.h>

namespace moe::worker {
namespace {

TEST(StepReport, ReadsTheFieldsARankWrites) {
  moe::v1::StepMetrics m;
  ASSERT_TRUE(StepMetricsFromJson(R"({"step": 3, "total_steps": 10, "loss": 4.5, "tokens": 2048, "memory_peak_bytes": 1e6})", &m).ok());
  EXPECT_EQ(m.step(), 3);
  EXPECT_EQ(m.total_steps(), 10);
  EXPECT_EQ(m.loss(), 4.5);
  EXPECT_EQ(m.tokens(), 2048);
  EXPECT_EQ(m.memory_peak_bytes(), 1000000);
}

// fuzz_step_report's crash (tests/fuzz/regressions/fuzz_step_report): a count past int64 was cast from
// double, which is undefined behaviour; now the report is refused and the field named.
TEST(StepReport, ACountPastInt64IsRefusedNotCast) {
  for (const char* bad : {R"({"step": 1, "memory_peak_bytes": 23155490090100000007})", R"({"tokens": 1e300})",
                          R"({"step": 1.5})", R"({"total_steps": "many"})"}) {
    moe::v1::StepMetrics m;
    const Status st = StepMetricsFromJson(bad, &m);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("expected an integer"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace moe::worker
