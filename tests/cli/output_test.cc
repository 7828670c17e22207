// moectl's machine output: the object form (cli/object_form.h) and kubectl's jsonpath and
// custom-columns over it (cli/jsonpath.h).
#include <gtest/gtest.h>

#include "cli/jsonpath.h"
#include "cli/object_form.h"
#include "cli/top.h"
#include "moe/v1/job_service.pb.h"

namespace moe::cli {
namespace {

moe::v1::Job TwoRankJob() {
  moe::v1::Job j;
  j.set_id("tiny-1");
  j.set_state(moe::v1::RUNNING);
  j.set_created_at(1764790801.25);   // 2025-12-03T19:40:01.250Z
  j.set_checkpoint_step(1ll << 40);  // an int64 past 2^32: a number, not a string
  j.mutable_spec()->mutable_metadata()->set_name("tiny");
  for (int r = 0; r < 2; ++r) {
    auto* p = j.add_placement();
    p->set_rank(r);
    p->set_worker(r == 0 ? "w0" : "w1");
  }
  j.mutable_last_metrics()->set_step(19);
  j.mutable_last_metrics()->set_loss(0.1);
  return j;
}

TEST(ObjectForm, KeepsZerosNumbersTimesAndShortestFloats) {
  const std::string json = ToJson(ObjectNode(TwoRankJob()));
  EXPECT_NE(json.find("\"rank\":0"), std::string::npos) << json;  // rank 0 is not dropped
  EXPECT_NE(json.find("\"restarts\":0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"step\":19"), std::string::npos) << json;  // int64: a number
  EXPECT_NE(json.find("\"checkpoint_step\":1099511627776"), std::string::npos) << json;
  EXPECT_NE(json.find("\"loss\":0.1,"), std::string::npos) << json;  // not 0.10000000000000001
  EXPECT_NE(json.find("\"created_at\":\"2025-12-03T19:40:01.250Z\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"updated_at\":null"), std::string::npos) << json;  // never: null, not 1970
  EXPECT_NE(json.find("\"state\":\"RUNNING\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"last_metrics\""), std::string::npos) << json;  // snake_case
  EXPECT_EQ(json.find("lastMetrics"), std::string::npos) << json;
  // A field with presence that was never set is left out (not given is not zero).
  EXPECT_EQ(json.find("\"priority\""), std::string::npos) << json;
  // YAML is the same tree: the string "19"-like values stay strings, numbers stay numbers.
  const std::string yaml = ToYaml(ObjectNode(TwoRankJob()));
  EXPECT_NE(yaml.find("state: RUNNING"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("step: 19\n"), std::string::npos) << yaml;
}

TEST(ObjectForm, NonFiniteIsNull) {
  moe::v1::StepMetrics m;
  m.set_loss(std::numeric_limits<double>::quiet_NaN());
  EXPECT_NE(ToJson(ObjectNode(m)).find("\"loss\":null"), std::string::npos);
  EXPECT_EQ(ShortestRoundTrip(0.1), "0.1");
  EXPECT_EQ(ShortestRoundTrip(1e-7), "1.0e-07");  // a point in the mantissa: YAML 1.1 reads a float
  EXPECT_EQ(ShortestRoundTrip(3e-4), "3.0e-04");
  EXPECT_EQ(ShortestRoundTrip(2.5e-5), "2.5e-05");
  EXPECT_EQ(ShortestRoundTrip(0.1f), "0.1");
  EXPECT_EQ(Rfc3339(1e300), "");  // no undefined cast of a garbage time
}

std::string Path(const std::string& t) {
  StatusOr<std::string> out = JsonPath(t, ObjectNode(TwoRankJob()));
  EXPECT_TRUE(out.ok()) << t << ": " << out.status().message();
  return out.ok() ? *out : "";
}

TEST(JsonPath, KubectlForms) {
  EXPECT_EQ(Path("{.state}"), "RUNNING");
  EXPECT_EQ(Path(".state"), "RUNNING");  // a lone path without braces
  EXPECT_EQ(Path("{.placement[0].rank}"), "0");
  EXPECT_EQ(Path("{.placement[-1].worker}"), "w1");
  EXPECT_EQ(Path("{.placement[*].worker}"), "w0 w1");
  EXPECT_EQ(Path("{.placement[0:1].worker}"), "w0");
  EXPECT_EQ(Path("{.spec.metadata.name}"), "tiny");
  EXPECT_EQ(Path("{$.last_metrics.step}"), "19");
  EXPECT_EQ(Path("{..step}"), "19");
  EXPECT_EQ(Path("{.placement[?(@.worker==\"w1\")].rank}"), "1");
  EXPECT_EQ(Path("{.placement[?(@.rank>0)].worker}"), "w1");
  EXPECT_EQ(Path("{.placement[?(@.worker==0)].rank}"), "");  // "w0" is not the number 0
  EXPECT_EQ(Path("{range .placement[*]}{.rank}{\"\\t\"}{.worker}{\"\\n\"}{end}"), "0\tw0\n1\tw1\n");
  EXPECT_EQ(Path("id={.id} step={.last_metrics.step}"), "id=tiny-1 step=19");
  EXPECT_EQ(Path("{.no_such_key}"), "");  // missing: nothing, as kubectl's default
  EXPECT_EQ(Path("{.placement[0]}"),
            "{\"rank\":0,\"worker\":\"w0\",\"rack\":\"\",\"node\":\"\","
            "\"device\":\"\",\"pp\":0,\"dp\":0,\"ep\":0}")
      << "an object prints as JSON";
}

TEST(JsonPath, RefusesWhatDoesNotParse) {
  for (const char* bad : {"{.state", "{range .placement[*]}{.rank}", "{end}", "{.placement[x]}",
                          "{state}", "{.placement[0}"}) {
    StatusOr<std::string> out = JsonPath(bad, ObjectNode(TwoRankJob()));
    EXPECT_FALSE(out.ok()) << bad;
    if (!out.ok()) {
      EXPECT_NE(out.status().message().find("jsonpath"), std::string::npos) << bad;
    }
  }
}

TEST(CustomColumns, RowsAndNone) {
  moe::v1::ListJobsResponse list;
  *list.add_jobs() = TwoRankJob();
  *list.add_jobs() = TwoRankJob();
  list.mutable_jobs(1)->set_id("tiny-2");
  list.mutable_jobs(1)->clear_placement();
  const Node object = ObjectNode(list);
  StatusOr<TableRows> t = CustomColumns(
      "ID:.id,FIRST:{.placement[0].worker},NAME:spec.metadata.name", *object.Find("jobs"));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->header, (std::vector<std::string>{"ID", "FIRST", "NAME"}));
  ASSERT_EQ(t->rows.size(), 2u);
  EXPECT_EQ(t->rows[0], (std::vector<std::string>{"tiny-1", "w0", "tiny"}));
  EXPECT_EQ(t->rows[1], (std::vector<std::string>{"tiny-2", "<none>", "tiny"}));
  EXPECT_FALSE(CustomColumns("ID", object).ok());
  EXPECT_FALSE(CustomColumns("ID:.id,:x", object).ok());
  EXPECT_FALSE(CustomColumns("ID:{}", object).ok());
  EXPECT_FALSE(CustomColumns("ID: ", object).ok());
}

// What the controller keeps for itself stays out of the object a user reads: goodput's accounting
// state, and an enum never set (stop_state of a job never told to stop); one that is set shows.
TEST(ObjectForm, LeavesOutBookkeepingAndUnsetEnums) {
  moe::v1::Job j = TwoRankJob();
  j.mutable_goodput()->set_mark(1764790801);
  j.mutable_goodput()->set_open_cause("running");
  j.mutable_goodput()->set_productive_seconds(12);
  std::string json = ToJson(ObjectNode(j));
  for (const char* hidden : {"\"mark\"", "\"open_cause\"", "\"backoff_until\"", "\"counted_step\"",
                             "stop_state", "JOB_STATE_UNSPECIFIED"}) {
    EXPECT_EQ(json.find(hidden), std::string::npos) << hidden << " in " << json;
  }
  EXPECT_NE(json.find("\"productive_seconds\":12"), std::string::npos) << json;
  j.set_stop_state(moe::v1::CANCELLED);
  json = ToJson(ObjectNode(j));
  EXPECT_NE(json.find("\"stop_state\":\"CANCELLED\""), std::string::npos) << json;
}

// moectl top: a rack's TFLOP/s is the sum over the jobs running there now; a preempted job whose
// placement is still recorded (the same workers now run another job) adds nothing and shows "-".
TEST(Top, ARacksTflopsCountsRunningJobsOnly) {
  moe::v1::ListJobsResponse jobs;
  for (const auto state : {moe::v1::RUNNING, moe::v1::PREEMPTED}) {
    moe::v1::Job* j = jobs.add_jobs();
    *j = TwoRankJob();
    j->set_id(state == moe::v1::RUNNING ? "runs" : "preempted");
    j->set_state(state);
    j->mutable_last_metrics()->set_tflops_per_device(state == moe::v1::RUNNING ? 10 : 7);
    for (auto& p : *j->mutable_placement()) p.set_rack("r0");
  }
  moe::v1::ListWorkersResponse workers;
  workers.add_workers()->set_rack("r0");
  const std::string screen = TopScreen(jobs, workers);
  const std::string racks = screen.substr(screen.find("RACKS"));
  EXPECT_NE(racks.find(" 20"), std::string::npos) << "2 ranks x 10 of the running job:\n" << racks;
  EXPECT_EQ(racks.find("34"), std::string::npos) << "the preempted job's 2 x 7 counted:\n" << racks;
  const size_t row = screen.find("preempted");
  EXPECT_EQ(screen.substr(row, screen.find('\n', row) - row).find(" 7"), std::string::npos)
      << "a job that does not run shows no TFLOP/s";
}

}  // namespace
}  // namespace moe::cli
