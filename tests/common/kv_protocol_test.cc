// The rendezvous line protocol between a rank and its worker agent.
#include "common/kv_protocol.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(KvProtocolTest, HexCarriesAnyBytes) {
  const std::string bytes("a b\n\0\xff", 6);
  std::string back;
  ASSERT_TRUE(HexDecode(HexEncode(bytes), &back));
  EXPECT_EQ(back, bytes);
  EXPECT_FALSE(HexDecode("abc", &back));  // odd length
  EXPECT_FALSE(HexDecode("zz", &back));   // not hex
  EXPECT_FALSE(HexDecode("AB", &back));   // upper case is not what the writer makes
}

TEST(KvProtocolTest, RequestsRoundTrip) {
  KvRequest set{KvRequest::Op::kSet, {"job/x/attempt/1/gloo 0"}, std::string("v\0v", 3), 0};
  auto s = ParseKvRequest(FormatKvRequest(set));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->op, KvRequest::Op::kSet);
  EXPECT_EQ(s->keys, set.keys);
  EXPECT_EQ(s->value, set.value);
  KvRequest wait{KvRequest::Op::kWait, {"a", "b", "c"}, "", 1500};
  auto w = ParseKvRequest(FormatKvRequest(wait));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->keys, wait.keys);
  EXPECT_EQ(w->timeout_ms, 1500);
  auto g = ParseKvRequest(FormatKvRequest({KvRequest::Op::kGet, {"k"}, "", 0}));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->op, KvRequest::Op::kGet);
}

TEST(KvProtocolTest, MalformedRequestsAreRefusedWithAReason) {
  for (const char* line : {"", "SET", "SET 61", "SET 6 61", "GET", "GET 61 62", "WAIT", "WAIT 10",
                           "WAIT x 61", "WAIT -5 61", "WAIT 10x 61", "DROP 61"}) {
    auto r = ParseKvRequest(line);
    EXPECT_FALSE(r.ok()) << "'" << line << "' was accepted";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(KvProtocolTest, RepliesMapToStatuses) {
  std::string v;
  EXPECT_TRUE(ParseKvReply(FormatKvReply(OkStatus()), nullptr).ok());
  ASSERT_TRUE(ParseKvReply(FormatKvValue("hello"), &v).ok());
  EXPECT_EQ(v, "hello");
  EXPECT_EQ(ParseKvReply(FormatKvReply(NotFoundError("k")), &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseKvReply(FormatKvReply(DeadlineExceededError("slow")), &v).code(),
            StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ParseKvReply(FormatKvReply(UnavailableError("down")), &v).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(ParseKvReply("WHAT", &v).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace moe
