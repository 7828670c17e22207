#include "common/service_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace moe {
namespace {

TEST(ServiceLog, TextLinesLookLikeTheEnginesAndRankLinesKeepTheirPrefix) {
  const LogRecord r{LogLevel::kWarning, "disk slow", {}, -1};
  const std::string line = FormatLogRecord(r, "controller", false, 1764620401.25);
  EXPECT_EQ(line.substr(0, 1), "W");
  EXPECT_NE(line.find(".250 controller] disk slow"), std::string::npos) << line;
  EXPECT_EQ(
      FormatLogRecord(LogRecord{LogLevel::kInfo, "step 3", "job-ab", 1}, "worker w0", false, 0),
      "[job-ab r1] step 3");
}

TEST(ServiceLog, JsonLinesCarryTimeLevelComponentJobRankAndAnEscapedMessage) {
  EXPECT_EQ(
      FormatLogRecord(LogRecord{LogLevel::kError, "a \"quoted\" \\ path\\x01", "job-ab", 0},
                      "worker w0", true, 1764620401.25),
      R"({"time":"2025-12-01T20:20:01.250Z","level":"error","component":"worker w0","job":"job-ab","rank":0,)"
      R"("message":"a \"quoted\" \\ path\\x01"})");
  EXPECT_EQ(
      FormatLogRecord(LogRecord{LogLevel::kInfo, std::string_view("tab\there", 8), {}, -1},
                      "controller", true, 0),
      R"({"time":"1970-01-01T00:00:00.000Z","level":"info","component":"controller","message":"tab\u0009here"})");
}

TEST(ServiceLog, BadFlagsAreNamed) {
  ServiceLogOptions o{"c"};
  o.format = "xml";
  EXPECT_NE(InitServiceLog(o).message().find("--log-format: 'xml' is not text or json"),
            std::string::npos);
  o = ServiceLogOptions{"c", "loud"};
  EXPECT_NE(InitServiceLog(o).message().find("--log-level: unknown level 'loud'"),
            std::string::npos);
  o = ServiceLogOptions{"c"};
  o.file = "/proc/no/such/dir/log";
  EXPECT_NE(InitServiceLog(o).message().find("--log-file: /proc/no/such/dir/log"),
            std::string::npos);
}

// The file rotates at the configured size and keeps the configured number of old files; every line
// of every file is one JSON object.
TEST(ServiceLog, TheFileRotatesAtItsSizeAndKeepsMaxFiles) {
  const std::string dir = testing::TempDir() + "/service_log_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ServiceLogOptions o{"worker w0",     "info", dir + "/w.log",     /*max_file_mb=*/1,
                      /*max_files=*/2, "json", /*to_stderr=*/false};
  ASSERT_TRUE(InitServiceLog(o).ok());
  const std::string pad(200, 'x');
  for (int i = 0; i < 20000; ++i) MOE_LOG(INFO) << "line " << i << " " << pad;  // ~5 MiB
  for (int i = 0; i < 10; ++i) LogRankLine("job-ab", 1, "rank line " + std::to_string(i));
  MOE_LOG(DEBUG) << "filtered out";
  FlushServiceLog();
  SetLogSink(nullptr);
  for (const char* f : {"/w.log", "/w.1.log", "/w.2.log"}) {
    ASSERT_TRUE(std::filesystem::exists(dir + f)) << f;
    EXPECT_LE(std::filesystem::file_size(dir + f), (1u << 20) + 400) << f;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/w.3.log")) << "only 2 rotated files are kept";
  std::ifstream in(dir + "/w.log");
  std::string line, last;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    ASSERT_EQ(line.front(), '{') << line;
    ASSERT_EQ(line.back(), '}') << line;
    EXPECT_EQ(line.find("filtered out"), std::string::npos);
    last = line;
  }
  EXPECT_GT(lines, 1000);
  EXPECT_NE(last.find(R"("component":"worker w0","job":"job-ab","rank":1,"message":"rank line 9")"),
            std::string::npos)
      << last;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moe
