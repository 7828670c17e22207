// The services' probe and metrics port (common/http_server.h, common/http_health.h): its routes,
// and that slow clients (slowloris), clients that never finish their head and oversized heads
// cannot take it down.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/http_health.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A blocking TCP connection to 127.0.0.1:port from `from` (another loopback address stands for
// another client), reads timing out after 3 s; -1 on failure.
int Connect(int port, const char* from = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &a.sin_addr);
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  for (size_t at = 0; at < s.size();) {
    const ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// Everything the server sends until it closes (or 3 s pass without a byte).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  return out;
}

// The raw answer to `request` ("" when the connection failed).
std::string Exchange(int port, const std::string& request, const char* from = "127.0.0.1") {
  const int fd = Connect(port, from);
  if (fd < 0) return "";
  std::string out = SendAll(fd, request) ? ReadAll(fd) : "";
  ::close(fd);
  return out;
}

std::string Get(int port, const std::string& path, const char* from = "127.0.0.1") {
  return Exchange(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n", from);
}

int StatusOf(const std::string& answer) {
  return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.c_str() + 9) : 0;
}

std::string BodyOf(const std::string& answer) {
  const size_t at = answer.find("\r\n\r\n");
  return at == std::string::npos ? "" : answer.substr(at + 4);
}

// A server on an ephemeral loopback port with the probes and one registry's counter.
struct Served {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<HttpServer> server;
  int port = 0;

  explicit Served(HttpServerOptions o = {}) {
    auto& family =
        prometheus::BuildCounter().Name("moe_test_requests_total").Help("t").Register(*registry);
    family.Add({{"kind", "a"}}).Increment(3);
    auto s = ServeHealthAndMetrics("127.0.0.1:0", {registry}, o);
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (!s.ok()) return;
    server = std::move(*s);
    port = server->port();
  }
};

TEST(HttpServer, ProbesAnswer200Or503WithTheReason) {
  SetHealthProbes({});
  Served s;
  ASSERT_GT(s.port, 0);
  std::string a = Get(s.port, "/healthz");
  EXPECT_EQ(StatusOf(a), 200) << a;
  EXPECT_EQ(BodyOf(a), "ok\n");
  EXPECT_NE(a.find("Connection: close\r\n"), std::string::npos) << a;
  EXPECT_EQ(StatusOf(Get(s.port, "/readyz?verbose")), 200);  // the query string is ignored

  HealthProbes p;
  p.ready = [] { return ProbeAnswer{false, "not registered with c:1"}; };
  SetHealthProbes(p);
  EXPECT_EQ(StatusOf(Get(s.port, "/healthz")), 200);
  a = Get(s.port, "/readyz");
  EXPECT_EQ(StatusOf(a), 503) << a;
  EXPECT_EQ(BodyOf(a), "not registered with c:1\n");

  p.live = [] { return ProbeAnswer{false, "wedged"}; };
  SetHealthProbes(p);
  a = Get(s.port, "/healthz");
  EXPECT_EQ(StatusOf(a), 503);
  EXPECT_EQ(BodyOf(a), "wedged\n");
  SetHealthProbes({});
}

TEST(HttpServer, MetricsAreTheRegistrysInTextFormat) {
  SetHealthProbes({});
  Served s;
  const std::string a = Get(s.port, "/metrics");
  EXPECT_EQ(StatusOf(a), 200) << a;
  EXPECT_NE(a.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos)
      << a;
  EXPECT_NE(BodyOf(a).find("# TYPE moe_test_requests_total counter\n"), std::string::npos) << a;
  EXPECT_NE(BodyOf(a).find("moe_test_requests_total{kind=\"a\"} 3"), std::string::npos) << a;
  const size_t length = std::stoul(a.substr(a.find("Content-Length: ") + 16));
  EXPECT_EQ(length, BodyOf(a).size());
}

TEST(HttpServer, UnknownPathsAre404OtherMethods405AndHeadHasNoBody) {
  SetHealthProbes({});
  Served s;
  EXPECT_EQ(StatusOf(Get(s.port, "/nope")), 404);
  std::string a = Exchange(s.port, "POST /healthz HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
  EXPECT_EQ(StatusOf(a), 405) << a;
  EXPECT_NE(a.find("Allow: GET, HEAD\r\n"), std::string::npos);
  a = Exchange(s.port, "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusOf(a), 200) << a;
  EXPECT_EQ(BodyOf(a), "");
  EXPECT_NE(a.find("Content-Length: 3\r\n"), std::string::npos) << a;
  EXPECT_EQ(StatusOf(Exchange(s.port, "nonsense\r\n\r\n")), 400);
}

// Clients that each start a request and then send a header line every 0.2 s, never ending it;
// each reconnects when the server drops it, so `n` stay open (or keep trying) until destroyed.
class Slowloris {
 public:
  Slowloris(int port, int n, const char* from) : port_(port), from_(from), fds_(n, -1) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Slowloris() {
    stop_ = true;
    thread_.join();
    for (const int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  int open() const { return open_; }
  int dropped() const { return dropped_; }

 private:
  void Run() {
    while (!stop_) {
      int open = 0;
      for (int& fd : fds_) {
        if (fd >= 0 && !Alive(fd)) {
          ::close(fd);
          fd = -1;
          ++dropped_;
        }
        if (fd < 0) fd = Start();
        open += fd >= 0;
      }
      open_ = open;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  int Start() {
    const int fd = Connect(port_, from_);
    if (fd >= 0 && !SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n")) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  // Sends the next header line; false once the server has closed the connection.
  static bool Alive(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) return false;  // EOF or RST (the server sends nothing else)
    return ::send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL | MSG_DONTWAIT) == 11;
  }

  const int port_;
  const char* from_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<int> open_{0}, dropped_{0};
  std::thread thread_;
};

// 64 slow connections from each of `attackers` while a client at `client` asks /healthz every
// 0.1 s for `seconds`: every answer is a 200 within 1 s.
void ProbesAnswerUnderSlowloris(std::vector<const char*> attackers, const char* client,
                                HttpServerOptions o = {}, double seconds = 3) {
  SetHealthProbes({});
  Served s(o);
  ASSERT_GT(s.port, 0);
  std::vector<std::unique_ptr<Slowloris>> slow;
  for (const char* from : attackers) slow.push_back(std::make_unique<Slowloris>(s.port, 64, from));
  const auto begin = Clock::now();
  while (slow.back()->open() < 16 && SecondsSince(begin) < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(slow.back()->open(), 16) << "the slow connections did not open";
  int asked = 0;
  for (const auto start = Clock::now(); SecondsSince(start) < seconds; ++asked) {
    const auto t = Clock::now();
    const std::string a = Get(s.port, "/healthz", client);
    const double took = SecondsSince(t);
    ASSERT_EQ(StatusOf(a), 200) << "probe " << asked << " after " << took << " s: " << a;
    ASSERT_LT(took, 1.0) << "probe " << asked;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(asked, 5);
  // The caps and the head deadline were at work: slow connections were dropped along the way.
  for (const auto& a : slow) EXPECT_GT(a->dropped(), 0);
}

TEST(HttpServer, ProbesFromAnotherAddressAnswerUnder64SlowConnections) {
  ProbesAnswerUnderSlowloris({"127.0.0.1"}, "127.0.0.2");
}

TEST(HttpServer, ProbesFromTheSameAddressAnswerUnder64SlowConnections) {
  ProbesAnswerUnderSlowloris({"127.0.0.1"}, "127.0.0.1");
}

// Slow connections from many addresses fill the total cap: the oldest are dropped for new ones.
TEST(HttpServer, ProbesAnswerWhenSlowConnectionsFillTheTotalCap) {
  HttpServerOptions o;
  o.max_connections = 24;
  ProbesAnswerUnderSlowloris({"127.0.0.3", "127.0.0.4"}, "127.0.0.2", o, 1.5);
}

// A client that asks for a large page and never reads it is dropped at the write deadline, and
// meanwhile the probes answer.
TEST(HttpServer, AClientThatDoesNotReadIsDroppedAtTheWriteDeadline) {
  HttpServerOptions o;
  o.write_deadline = std::chrono::milliseconds(300);
  auto bound = HttpServer::Bind("127.0.0.1:0", o);
  ASSERT_TRUE(bound.ok());
  HttpServer& s = **bound;
  const std::string page(64 << 20, 'x');
  s.Handle("/big", [&page] { return HttpResponse{200, "text/plain", page}; });
  s.Handle("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
  s.Start();
  const int fd = Connect(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "GET /big HTTP/1.1\r\n\r\n"));
  const auto t = Clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(StatusOf(Get(s.port(), "/healthz")), 200);
  EXPECT_LT(SecondsSince(t), 1.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the deadline, unread
  const size_t got = ReadAll(fd).size();                        // what the kernel held, then EOF
  EXPECT_LT(got, page.size());
  EXPECT_LT(SecondsSince(t), 3.0) << "the connection was not closed";
  ::close(fd);
}

TEST(HttpServer, AHeadNotFinishedByItsDeadlineIsClosed) {
  SetHealthProbes({});
  HttpServerOptions o;
  o.head_deadline = std::chrono::milliseconds(300);
  Served s(o);
  const int fd = Connect(s.port);
  ASSERT_GE(fd, 0);
  const auto t = Clock::now();
  ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n"));
  // A header line every 50 ms: each read is quick, the whole head never ends.
  bool closed = false;
  while (!closed && SecondsSince(t) < 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pollfd p{fd, POLLIN, 0};
    closed = ::poll(&p, 1, 0) > 0 || !SendAll(fd, "X-Slow: 1\r\n");
  }
  char c;
  EXPECT_TRUE(closed);
  EXPECT_LE(::recv(fd, &c, 1, 0), 0);  // EOF (or a reset): no answer
  EXPECT_GE(SecondsSince(t), 0.25);
  EXPECT_LT(SecondsSince(t), 2.0);
  ::close(fd);
}

TEST(HttpServer, AnOversizedHeadGets431) {
  SetHealthProbes({});
  Served s;
  const std::string pad(10000, 'a');
  const std::string a =
      Exchange(s.port, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + pad + "\r\n\r\n");
  EXPECT_EQ(StatusOf(a), 431) << a.substr(0, 200);
  // Just under the cap is fine.
  const std::string fits(8000, 'a');
  EXPECT_EQ(StatusOf(Exchange(s.port, "GET /healthz HTTP/1.1\r\nX-Pad: " + fits + "\r\n\r\n")),
            200);
}

TEST(HttpServer, ATakenPortSaysAddressAlreadyInUse) {
  auto first = HttpServer::Bind("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status().message();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = HttpServer::Bind(taken);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("address already in use"), std::string::npos)
      << second.status().message();
  auto served = ServeHealthAndMetrics(taken, {});
  ASSERT_FALSE(served.ok());
  EXPECT_NE(served.status().message().find("address already in use"), std::string::npos);
}

TEST(HttpServer, ListenAddressesAreHostPort) {
  for (const char* bad : {"nonsense", "127.0.0.1:99999", "127.0.0.1:", "::1:80", "[::1]80"}) {
    EXPECT_FALSE(HttpServer::Bind(bad).ok()) << bad;
  }
  for (const char* good : {"0.0.0.0:0", ":0", "localhost:0"}) {
    auto s = HttpServer::Bind(good);
    EXPECT_TRUE(s.ok()) << good << ": " << s.status().message();
  }
  auto v6 = HttpServer::Bind("[::1]:0");
  if (!v6.ok() && v6.status().message().find("not available") != std::string::npos) {
    GTEST_SKIP() << "no IPv6 loopback here";
  }
  ASSERT_TRUE(v6.ok()) << v6.status().message();
  EXPECT_GT((*v6)->port(), 0);
}

// A scrape whose collection is slow runs on the worker thread: the probes answer meanwhile.
TEST(HttpServer, ASlowScrapeDoesNotHoldTheProbesUp) {
  SetHealthProbes({});
  std::atomic<bool> entered{false}, release{false};
  auto slow = CollectorOf([&entered, &release] {
    entered = true;
    for (const auto t = Clock::now(); !release && SecondsSince(t) < 5;)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return std::vector<prometheus::MetricFamily>{};
  });
  auto s = ServeHealthAndMetrics("127.0.0.1:0", {slow});
  ASSERT_TRUE(s.ok());
  const int port = (*s)->port();
  std::string scraped;
  std::thread scrape([&] { scraped = Get(port, "/metrics"); });
  for (const auto t = Clock::now(); !entered && SecondsSince(t) < 3;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(entered);
  for (int i = 0; i < 5; ++i) {
    const auto t = Clock::now();
    EXPECT_EQ(StatusOf(Get(port, "/healthz")), 200);
    EXPECT_LT(SecondsSince(t), 1.0);
  }
  release = true;
  scrape.join();
  EXPECT_EQ(StatusOf(scraped), 200) << scraped;
}

}  // namespace
}  // namespace moe
