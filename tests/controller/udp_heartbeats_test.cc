// UDP heartbeats (common/udp_beat.h, controller/udp_heartbeats.h, worker/agent/udp_beat_link.h):
// the datagram's MAC holds against a wrong key and any changed byte; on loopback an agent's
// datagram renews its lease in the LeaseBook and comes back acknowledged; forged, replayed,
// superseded and closed-lease datagrams renew nothing and are not acknowledged.
#include "controller/udp_heartbeats.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include "common/udp_beat.h"
#include "controller/clock.h"
#include "controller/lease_book.h"
#include "worker/agent/udp_beat_link.h"

namespace moe::controller {
namespace {

using worker::UdpBeatLink;

// Polls `done` for up to 3 s (the reader batches every 10 ms).
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 300; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(UdpBeatTest, TheMacHoldsAgainstAnotherKeyAndAnyChangedByte) {
  const std::string key = beat::NewKey(), other = beat::NewKey();
  ASSERT_EQ(key.size(), beat::kKeyBytes);
  EXPECT_NE(key, other);
  const beat::Datagram d = beat::Encode({beat::Kind::kBeat, 0x1122334455667788ull, 42}, key);
  const auto h = beat::Peek(d.data(), d.size());
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->kind, beat::Kind::kBeat);
  EXPECT_EQ(h->lease_id, 0x1122334455667788ull);
  EXPECT_EQ(h->seq, 42u);
  EXPECT_TRUE(beat::Verify(d.data(), d.size(), key));
  EXPECT_FALSE(beat::Verify(d.data(), d.size(), other));
  EXPECT_FALSE(beat::Verify(d.data(), d.size(), ""));
  for (size_t i = 0; i < d.size(); ++i) {
    beat::Datagram bad = d;
    bad[i] ^= 0x01;
    const bool peeked = beat::Peek(bad.data(), bad.size()).has_value();
    EXPECT_FALSE(peeked && beat::Verify(bad.data(), bad.size(), key)) << "byte " << i;
  }
  EXPECT_FALSE(beat::Peek(d.data(), d.size() - 1).has_value());
  std::set<uint64_t> ids;
  for (int i = 0; i < 100; ++i) ids.insert(beat::NewLeaseId());
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(ids.count(0), 0u);
}

class UdpLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(udp_.Start("127.0.0.1", 0).ok());
    ASSERT_GT(udp_.port(), 0);
    book_.Open("w", &stream_);
    udp_.Grant("w", &stream_, &granted_);
    ASSERT_EQ(granted_.heartbeat_udp_port(), static_cast<uint32_t>(udp_.port()));
    ASSERT_NE(granted_.heartbeat_lease_id(), 0u);
    ASSERT_EQ(granted_.heartbeat_key().size(), beat::kKeyBytes);
    link_ = UdpBeatLink::For("127.0.0.1", udp_.port());
    ASSERT_NE(link_, nullptr);
    link_->Add(granted_.heartbeat_lease_id(), granted_.heartbeat_key());
  }
  // A raw datagram from a socket of its own (no ack is read).
  void SendRaw(const beat::Datagram& d) {
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(udp_.port()));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(d.size()));
    close(fd);
  }
  bool HeardNow() { return book_.LastHeard("w") == clock_.Now(); }

  FakeClock clock_;
  LeaseBook book_{clock_, 3};
  UdpHeartbeats udp_{book_};
  int stream_ = 0;
  moe::v1::Registered granted_;
  std::shared_ptr<UdpBeatLink> link_;
};

TEST_F(UdpLeaseTest, ADatagramRenewsTheLeaseAndIsAcknowledged) {
  const uint64_t id = granted_.heartbeat_lease_id();
  clock_.Advance(2);
  EXPECT_FALSE(HeardNow());
  EXPECT_EQ(link_->Beat(id, 1), 0u);
  EXPECT_TRUE(Eventually([&] { return HeardNow(); })) << "the datagram renewed nothing";
  uint64_t seq = 1, acked = 0;
  EXPECT_TRUE(Eventually([&] { return (acked = link_->Beat(id, ++seq)) > 0; }))
      << "no ack came back";
  EXPECT_GE(acked, 1u);
  EXPECT_LE(acked, seq);
  EXPECT_TRUE(Eventually([&] { return udp_.renewed() == static_cast<int64_t>(seq); }));
  EXPECT_EQ(udp_.refused(), 0);
  // Three seconds of silence after the last beat: the lease expires as a stream's would.
  for (int i = 0; i < 35; ++i) {  // ticking every 100 ms (a longer gap is the controller's stall)
    clock_.Advance(0.1);
    book_.NoteTick();
  }
  EXPECT_EQ(book_.Expire(), std::vector<std::string>{"w"});
}

TEST_F(UdpLeaseTest, ForgedReplayedSupersededAndClosedDatagramsRenewNothing) {
  const uint64_t id = granted_.heartbeat_lease_id();
  const std::string& key = granted_.heartbeat_key();
  clock_.Advance(2);
  SendRaw(beat::Encode({beat::Kind::kBeat, id, 1}, beat::NewKey()));  // another key
  SendRaw(beat::Encode({beat::Kind::kBeat, id + 1, 1}, key));         // another lease
  SendRaw(beat::Encode({beat::Kind::kAck, id, 1}, key));              // not a beat
  EXPECT_TRUE(Eventually([&] { return udp_.refused() == 3; })) << udp_.refused();
  EXPECT_FALSE(HeardNow());

  const beat::Datagram good = beat::Encode({beat::Kind::kBeat, id, 5}, key);
  SendRaw(good);
  EXPECT_TRUE(Eventually([&] { return HeardNow(); }));
  clock_.Advance(1);
  SendRaw(good);                                           // replayed
  SendRaw(beat::Encode({beat::Kind::kBeat, id, 4}, key));  // an older sequence
  EXPECT_TRUE(Eventually([&] { return udp_.refused() == 5; })) << udp_.refused();
  EXPECT_FALSE(HeardNow());

  // A reconnect's registration supersedes the lease id: the old one renews nothing.
  moe::v1::Registered again;
  int new_stream = 0;
  book_.Open("w", &new_stream);
  udp_.Grant("w", &new_stream, &again);
  EXPECT_NE(again.heartbeat_lease_id(), id);
  clock_.Advance(1);  // Open heard it now
  SendRaw(beat::Encode({beat::Kind::kBeat, id, 6}, key));
  EXPECT_TRUE(Eventually([&] { return udp_.refused() == 6; })) << udp_.refused();
  EXPECT_FALSE(HeardNow());
  SendRaw(beat::Encode({beat::Kind::kBeat, again.heartbeat_lease_id(), 1}, again.heartbeat_key()));
  EXPECT_TRUE(Eventually([&] { return HeardNow(); }));

  // A closed lease (the worker lost or gone): its datagrams renew nothing.
  book_.Close("w");
  clock_.Advance(1);
  SendRaw(beat::Encode({beat::Kind::kBeat, again.heartbeat_lease_id(), 2}, again.heartbeat_key()));
  EXPECT_TRUE(Eventually([&] { return udp_.refused() == 7; })) << udp_.refused();
  EXPECT_FALSE(HeardNow());
  EXPECT_EQ(udp_.renewed(), 2);
}

TEST(UdpHostTest, TheHostOfAGrpcTarget) {
  EXPECT_EQ(worker::UdpHostOf("127.0.0.1:50051"), "127.0.0.1");
  EXPECT_EQ(worker::UdpHostOf("[::1]:50051"), "::1");
  EXPECT_EQ(worker::UdpHostOf("dns:///ctl.example:50051"), "ctl.example");
  EXPECT_EQ(worker::UdpHostOf("unix:/run/moe.sock"), "");
  EXPECT_EQ(worker::UdpHostOf("nohost"), "");
}

}  // namespace
}  // namespace moe::controller
