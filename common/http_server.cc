#include "common/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

// epoll keys: the listener, the worker's wake-up, then one per connection in accept order (never
// reused, so an event for a connection closed earlier in the same batch finds nothing).
constexpr uint64_t kListenerKey = 0, kWakeKey = 1, kFirstConnKey = 2;
constexpr int kMaxEvents = 64, kAcceptsPerEvent = 64;
// After accept fails for want of descriptors (EMFILE), the listener rests this long: level-
// triggered, it would otherwise wake the loop at once, again and again.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

// What a connection is doing: reading its head, waiting for the worker's answer, writing its
// answer, or done (reading what the client still sends before closing).
enum class Phase { kHead, kHandling, kWrite, kDrain };
// A connection rescued from being dropped (its head had arrived) frees its place once answered, so
// a few tries make room; a bound all the same.
constexpr int kMakeRoomTries = 4;

struct Conn {
  int fd = -1;
  std::string peer;  // the client's address, without port: the per-peer cap's key
  Phase phase = Phase::kHead;
  Clock::time_point deadline;
  std::string in, out;
  size_t sent = 0;
  std::shared_ptr<std::atomic<bool>> gone;  // set on close: the worker skips its job
};

struct Head {
  enum Kind { kIncomplete, kTooLarge, kBad, kComplete } kind = kIncomplete;
  std::string method, path;
};

// The request line of a complete head; the headers are not needed (every answer closes).
Head ParseRequestLine(const std::string& in, size_t head_end) {
  Head h;
  h.kind = Head::kBad;
  std::string line = in.substr(0, std::min(in.find('\n'), head_end));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) return h;
  if (line.compare(sp2 + 1, 7, "HTTP/1.") != 0) return h;
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (target.empty() || target[0] != '/') return h;
  h.kind = Head::kComplete;
  h.method = line.substr(0, sp1);
  h.path = target.substr(0, target.find('?'));
  return h;
}

Head ParseHead(const std::string& in, size_t max_bytes) {
  size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) end = in.find("\n\n");  // lenient: bare LF line ends
  if (end == std::string::npos || end > max_bytes) {
    Head h;
    if (in.size() > max_bytes) h.kind = Head::kTooLarge;
    return h;
  }
  return ParseRequestLine(in, end);
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

std::string Serialize(const HttpResponse& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + Reason(r.status) +
                    "\r\nContent-Type: " + r.content_type +
                    "\r\nContent-Length: " + std::to_string(r.body.size()) +
                    "\r\nCache-Control: no-store\r\nConnection: close\r\n";
  if (r.status == 405) out += "Allow: GET, HEAD\r\n";
  out += "\r\n";
  if (!head_only) out += r.body;
  return out;
}

HttpResponse Plain(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body)};
}

HttpResponse Run(const HttpHandler& handler) {
  try {
    return handler();
  } catch (const std::exception& e) {
    return Plain(500, std::string("internal error: ") + e.what() + "\n");
  }
}

std::string PeerOf(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof(buf));
  } else if (a.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

// "host:port", "[v6]:port", ":port" or "port" (every IPv4 interface, as civetweb took it).
StatusOr<std::pair<std::string, std::string>> SplitListen(const std::string& listen) {
  std::string host, port;
  if (!listen.empty() && listen[0] == '[') {
    const size_t close = listen.find(']');
    if (close == std::string::npos || listen.compare(close + 1, 1, ":") != 0)
      return InvalidArgumentError("not [address]:port");
    host = listen.substr(1, close - 1);
    port = listen.substr(close + 2);
  } else {
    const size_t colon = listen.rfind(':');
    if (colon != std::string::npos && listen.find(':') != colon)
      return InvalidArgumentError("an IPv6 address goes in brackets: [address]:port");
    host = colon == std::string::npos ? "" : listen.substr(0, colon);
    port = colon == std::string::npos ? listen : listen.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return InvalidArgumentError("not host:port (the port a number up to 65535)");
  return std::make_pair(host.empty() ? std::string("0.0.0.0") : host, port);
}

std::string BindError(int err) {
  if (err == EADDRINUSE) return "address already in use: another process serves that port";
  if (err == EADDRNOTAVAIL) return "address not available: not an address of this host";
  if (err == EACCES) return "permission denied: a port below 1024 needs privilege";
  return std::string("bind: ") + std::strerror(err);
}

// A listening socket on the first of the host's addresses that binds (IPv4 first: a name such as
// localhost then serves where clients of 127.0.0.1 look), or the first failure's reason.
StatusOr<int> ListenOn(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return InvalidArgumentError("cannot resolve " + host + ": " + ::gai_strerror(rc));
  std::vector<const addrinfo*> order;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) order.push_back(a);
  std::stable_partition(order.begin(), order.end(),
                        [](const addrinfo* a) { return a->ai_family == AF_INET; });
  int fd = -1, first_err = 0;
  for (const addrinfo* a : order) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      if (first_err == 0) first_err = errno;
      continue;
    }
    const int one = 1;  // rebinding at once after a restart, past the old socket's TIME_WAIT
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
    if (first_err == 0) first_err = errno;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) return UnavailableError(BindError(first_err));
  return fd;
}

// Wakes the event loop (an eventfd's counter goes up by one). A write fails only when the counter
// is full, and then the loop is awake anyway.
void Poke(int wake_fd) {
  const uint64_t one = 1;
  const ssize_t n = ::write(wake_fd, &one, sizeof(one));
  static_cast<void>(n);
}

// What dropping the connection costs, lowest first: one done costs nothing; one that began its
// head and has not finished it is the slowloris' mark; one that has sent nothing yet may be a
// client whose head is on its way (a probe accepted a moment ago); an answer on its way is dropped
// last.
int Worth(const Conn& c) {
  switch (c.phase) {
    case Phase::kDrain:
      return 0;
    case Phase::kHead:
      return c.in.empty() ? 2 : 1;
    case Phase::kHandling:
      return 3;
    case Phase::kWrite:
      return 4;
  }
  return 4;
}

// The total cap, and no more than a quarter of the process's descriptors: connections to this
// port must not leave the service itself without (RLIMIT_NOFILE is often 1024).
size_t TotalCap(int max_connections) {
  size_t cap = static_cast<size_t>(std::max(max_connections, 1));
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    cap = std::min<size_t>(cap, std::max<size_t>(lim.rlim_cur / 4, 16));
  return cap;
}

int BoundPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(int listen_fd, HttpServerOptions o)
      : o_(o),
        listen_fd_(listen_fd),
        epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
        wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        port_(BoundPort(listen_fd)),
        max_connections_(TotalCap(o.max_connections)) {}
  ~Impl();
  bool ok() const { return epoll_fd_ >= 0 && wake_fd_ >= 0; }
  int port() const { return port_; }
  void Handle(const std::string& path, HttpHandler h, HttpRunOn run_on) {
    routes_[path] = Route{std::move(h), run_on};
  }
  void Start();

 private:
  struct Route {
    HttpHandler handler;
    HttpRunOn run_on = HttpRunOn::kEventThread;
  };
  struct Job {
    uint64_t key = 0;
    std::shared_ptr<std::atomic<bool>> gone;
    const HttpHandler* handler = nullptr;
    bool head_only = false;
  };

  // The event thread.
  void Loop();
  int NextWakeMs() const;
  void OnEvent(uint64_t key, uint32_t events);
  void AcceptAll();
  void Admit(int fd, std::string peer);
  void MakeRoom(const std::string* peer);
  std::map<uint64_t, Conn>::iterator LeastWorth(const std::string* peer);
  void Read(uint64_t key, Conn& c);
  void Dispatch(uint64_t key, Conn& c, const Head& head);
  void Answer(uint64_t key, Conn& c, std::string out);
  void Write(uint64_t key, Conn& c);
  void Drain(uint64_t key, Conn& c);
  void Close(uint64_t key);
  void Expire();
  void SetInterest(uint64_t key, int fd, uint32_t events) const;
  void TakeAnswers();
  // The worker thread.
  void Work();

  const HttpServerOptions o_;
  const int listen_fd_, epoll_fd_, wake_fd_, port_;
  const size_t max_connections_;
  std::unordered_map<std::string, Route> routes_;  // fixed once started: read without a lock
  std::map<uint64_t, Conn> conns_;                 // by key: oldest first
  std::unordered_map<std::string, int> per_peer_;
  uint64_t next_key_ = kFirstConnKey;
  Clock::time_point accept_paused_until_{};
  bool accept_paused_ = false;

  std::atomic<bool> stop_{false};
  std::thread loop_, worker_;
  std::mutex mu_;  // guards jobs_ and answers_ (the worker's queue in and out)
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<std::pair<uint64_t, std::string>> answers_;
};

HttpServer::Impl::~Impl() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  if (wake_fd_ >= 0) Poke(wake_fd_);
  if (loop_.joinable()) loop_.join();
  if (worker_.joinable()) worker_.join();
  while (!conns_.empty()) Close(conns_.begin()->first);
  for (const int fd : {listen_fd_, epoll_fd_, wake_fd_})
    if (fd >= 0) ::close(fd);
}

void HttpServer::Impl::Start() {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerKey;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeKey;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  loop_ = std::thread([this] { Loop(); });
  worker_ = std::thread([this] { Work(); });
}

void HttpServer::Impl::Loop() {
  epoll_event events[kMaxEvents];
  while (!stop_) {
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, NextWakeMs());
    for (int i = 0; i < n; ++i) OnEvent(events[i].data.u64, events[i].events);
    Expire();
  }
}

// Until the nearest deadline (a connection's, or the end of a pause in accepting).
int HttpServer::Impl::NextWakeMs() const {
  Clock::time_point next = Clock::time_point::max();
  if (accept_paused_) next = accept_paused_until_;
  for (const auto& [key, c] : conns_) next = std::min(next, c.deadline);
  if (next == Clock::time_point::max()) return -1;
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

void HttpServer::Impl::OnEvent(uint64_t key, uint32_t events) {
  if (key == kListenerKey) return AcceptAll();
  if (key == kWakeKey) return TakeAnswers();
  auto it = conns_.find(key);
  if (it == conns_.end()) return;  // closed earlier in this batch
  Conn& c = it->second;
  if (events & (EPOLLERR | EPOLLHUP)) return Close(key);
  if (c.phase == Phase::kHead) return Read(key, c);
  if (c.phase == Phase::kWrite) return Write(key, c);
  if (c.phase == Phase::kDrain) return Drain(key, c);
}

void HttpServer::Impl::AcceptAll() {
  for (int i = 0; i < kAcceptsPerEvent; ++i) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    const int fd =
        ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(fd, PeerOf(a));
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      accept_paused_ = true;
      accept_paused_until_ = Clock::now() + kAcceptPause;
      SetInterest(kListenerKey, listen_fd_, 0);
    }
    return;  // EAGAIN: none left
  }
}

// Takes every connection: at a cap, the one it would exceed makes room by dropping another.
void HttpServer::Impl::Admit(int fd, std::string peer) {
  if (per_peer_[peer] >= o_.max_connections_per_peer) MakeRoom(&peer);
  if (conns_.size() >= max_connections_) MakeRoom(nullptr);
  const uint64_t key = next_key_++;
  Conn& c = conns_[key];
  c.fd = fd;
  c.peer = std::move(peer);
  c.deadline = Clock::now() + o_.head_deadline;
  ++per_peer_[c.peer];
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  // A client's head is usually in by now: taken at once, it is answered before later connections
  // from the same address could push it out.
  Read(key, c);
}

// Frees a place (among `peer`'s connections, or anyone's) by dropping the connection whose loss
// costs least (Worth), the oldest of those: the one that has been reading its head the longest. A
// head is read once more before it is dropped: one that has arrived complete is answered instead.
void HttpServer::Impl::MakeRoom(const std::string* peer) {
  for (int i = 0; i < kMakeRoomTries; ++i) {
    const auto victim = LeastWorth(peer);
    if (victim == conns_.end()) return;
    const uint64_t key = victim->first;
    if (victim->second.phase == Phase::kHead) {
      Read(key, victim->second);  // may answer it, or find it closed (and erase it)
      const auto still = conns_.find(key);
      if (still == conns_.end()) return;
      if (still->second.phase != Phase::kHead) continue;
    }
    return Close(key);
  }
}

std::map<uint64_t, Conn>::iterator HttpServer::Impl::LeastWorth(const std::string* peer) {
  auto victim = conns_.end();
  for (auto it = conns_.begin(); it != conns_.end(); ++it) {
    if (peer != nullptr && it->second.peer != *peer) continue;
    if (victim == conns_.end() || Worth(it->second) < Worth(victim->second)) victim = it;
    if (Worth(victim->second) == 0) break;
  }
  return victim;
}

void HttpServer::Impl::Read(uint64_t key, Conn& c) {
  char buf[4096];
  // Up to a little past the cap: room for the blank line ending a head of exactly the cap.
  const size_t room = o_.max_head_bytes + 5 - c.in.size();
  const ssize_t n = ::recv(c.fd, buf, std::min(sizeof(buf), room), 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return Close(key);
  if (n < 0) return;
  c.in.append(buf, static_cast<size_t>(n));
  const Head head = ParseHead(c.in, o_.max_head_bytes);
  if (head.kind == Head::kIncomplete) return;
  if (head.kind == Head::kTooLarge) {
    return Answer(key, c, Serialize(Plain(431, "request head over the size limit\n"), false));
  }
  if (head.kind == Head::kBad) return Answer(key, c, Serialize(Plain(400, "bad request\n"), false));
  Dispatch(key, c, head);
}

void HttpServer::Impl::Dispatch(uint64_t key, Conn& c, const Head& head) {
  const bool head_only = head.method == "HEAD";
  if (head.method != "GET" && !head_only) {
    return Answer(key, c, Serialize(Plain(405, "only GET and HEAD\n"), false));
  }
  const auto route = routes_.find(head.path);
  if (route == routes_.end()) {
    return Answer(key, c, Serialize(Plain(404, "not found\n"), head_only));
  }
  if (route->second.run_on == HttpRunOn::kEventThread) {
    return Answer(key, c, Serialize(Run(route->second.handler), head_only));
  }
  c.phase = Phase::kHandling;
  c.deadline = Clock::time_point::max();  // the worker's answer comes, or the client leaves (HUP)
  c.gone = std::make_shared<std::atomic<bool>>(false);
  SetInterest(key, c.fd, 0);  // errors and hang-ups only
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.push_back(Job{key, c.gone, &route->second.handler, head_only});
  cv_.notify_one();
}

void HttpServer::Impl::Answer(uint64_t key, Conn& c, std::string out) {
  c.phase = Phase::kWrite;
  c.out = std::move(out);
  c.sent = 0;
  c.in.clear();
  c.deadline = Clock::now() + o_.write_deadline;
  SetInterest(key, c.fd, EPOLLOUT);
  Write(key, c);
}

void HttpServer::Impl::Write(uint64_t key, Conn& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;  // EPOLLOUT brings us back
    if (n < 0) return Close(key);
    c.sent += static_cast<size_t>(n);
  }
  // Answered: close our side, and read (and discard) until the client closes or the drain time
  // ends. Closing with unread input would send an RST, which can destroy the answer on its way.
  ::shutdown(c.fd, SHUT_WR);
  c.phase = Phase::kDrain;
  c.out.clear();
  c.deadline = Clock::now() + o_.drain_time;
  SetInterest(key, c.fd, EPOLLIN);
}

void HttpServer::Impl::Drain(uint64_t key, Conn& c) {
  char buf[4096];
  const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) Close(key);
}

void HttpServer::Impl::Close(uint64_t key) {
  auto it = conns_.find(key);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  if (c.gone) c.gone->store(true);
  ::close(c.fd);  // leaves the epoll set with it
  if (--per_peer_[c.peer] <= 0) per_peer_.erase(c.peer);
  conns_.erase(it);
}

// Closes every connection past its deadline (no 408: a client that slow gets nothing more), and
// resumes accepting after a pause.
void HttpServer::Impl::Expire() {
  const Clock::time_point now = Clock::now();
  std::vector<uint64_t> late;
  for (const auto& [key, c] : conns_)
    if (c.deadline <= now) late.push_back(key);
  for (const uint64_t key : late) Close(key);
  if (accept_paused_ && accept_paused_until_ <= now) {
    accept_paused_ = false;
    SetInterest(kListenerKey, listen_fd_, EPOLLIN);
  }
}

void HttpServer::Impl::SetInterest(uint64_t key, int fd, uint32_t events) const {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = key;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
}

// The worker's answers, to connections still waiting for them.
void HttpServer::Impl::TakeAnswers() {
  uint64_t count = 0;
  const ssize_t n = ::read(wake_fd_, &count, sizeof(count));
  static_cast<void>(
      n);  // EAGAIN: an earlier read took the count; the answers are here all the same
  std::vector<std::pair<uint64_t, std::string>> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    answers.swap(answers_);
  }
  for (auto& [key, out] : answers) {
    auto it = conns_.find(key);
    if (it != conns_.end() && it->second.phase == Phase::kHandling)
      Answer(key, it->second, std::move(out));
  }
}

void HttpServer::Impl::Work() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = jobs_.front();
      jobs_.pop_front();
    }
    if (job.gone->load()) continue;  // the client left (or was dropped) while it queued
    std::string out = Serialize(Run(*job.handler), job.head_only);
    {
      std::lock_guard<std::mutex> lock(mu_);
      answers_.emplace_back(job.key, std::move(out));
    }
    Poke(wake_fd_);
  }
}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Bind(const std::string& listen,
                                                       HttpServerOptions options) {
  MOE_ASSIGN_OR_RETURN(auto host_port, SplitListen(listen));
  MOE_ASSIGN_OR_RETURN(const int fd, ListenOn(host_port.first, host_port.second));
  auto impl = std::make_unique<Impl>(fd, options);
  if (!impl->ok()) return InternalError(std::string("epoll: ") + std::strerror(errno));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

void HttpServer::Handle(const std::string& path, HttpHandler handler, HttpRunOn run_on) {
  impl_->Handle(path, std::move(handler), run_on);
}

void HttpServer::Start() { impl_->Start(); }

int HttpServer::port() const { return impl_->port(); }

}  // namespace moe
