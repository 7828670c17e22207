// A small HTTP/1.1 server for a service's probe and metrics port (GET /healthz, /readyz, /metrics:
// common/http_health.h wires those routes), built so that no client can take the port down.
//
// Why not a thread-per-connection server (civetweb, under prometheus::Exposer, which this
// replaced): its timeout is per read, so a client sending a header line a second ("slowloris") held
// a thread for ever, and 16 such clients took an agent's /healthz down (48 the controller's): the
// kubelet would have restarted the pods. Here one event thread (epoll, non-blocking sockets) serves
// every connection, and each has:
//   - a deadline for its whole request head, counted from accept (not per read);
//   - a cap on the head's size (431 beyond it);
//   - a deadline for writing the answer (a client that does not read it is dropped);
//   - caps on connections per peer address and in total. A connection beyond a cap is always taken,
//     and the connection (of that address, or of anyone) that costs least to lose is dropped for
//     it: one already answered, else the one that has been reading its head the longest (one that
//     has begun a head before one that has sent nothing yet); answers on their way go last. So a
//     flood of slow connections from one address cannot lock out a probe, even one coming from the
//     same address (the kubelet and an attacker may share a node's IP): the probe is the newest
//     connection, and its head comes at once.
// Only GET and HEAD (405 otherwise); every answer carries `Connection: close`: the kubelet opens a
// connection per probe anyway, Prometheus opens one per scrape (every 15 s or so) at little cost,
// and there are no idle keep-alive connections to police.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace moe {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse()>;

struct HttpServerOptions {
  std::chrono::milliseconds head_deadline{2000};    // from accept to the head's blank line
  std::chrono::milliseconds write_deadline{10000};  // from the answer's start to its last byte
  std::chrono::milliseconds drain_time{1000};  // reading what a client sent beyond its head, after
                                               // answering, before close (so close sends no RST
                                               // that could destroy the answer in flight)
  size_t max_head_bytes = 8192;
  int max_connections_per_peer = 16;
  int max_connections = 512;  // and at most a quarter of RLIMIT_NOFILE
};

// Where a route's handler runs. kEventThread: inline, for answers that are cheap and must come even
// while a slow one is being built (the probes). kWorkerThread: on the server's one worker thread,
// in order, for answers that take locks of the service or may take long (/metrics): the event
// thread keeps accepting, reading and answering the probes meanwhile.
enum class HttpRunOn { kEventThread, kWorkerThread };

class HttpServer {
 public:
  // Binds `listen` ("host:port", "[v6]:port", "0.0.0.0:port", "[::]:port", ":port"; port 0 picks
  // a free one, see port()). Errors say why, e.g. "address already in use: ..."; the caller names
  // its flag and the address. Nothing is served until Start().
  static StatusOr<std::unique_ptr<HttpServer>> Bind(const std::string& listen,
                                                    HttpServerOptions options = {});
  ~HttpServer();  // stops serving: drops every connection, joins the threads
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Answers GET and HEAD of `path` (the query string ignored) with `handler`; before Start() only.
  void Handle(const std::string& path, HttpHandler handler,
              HttpRunOn run_on = HttpRunOn::kEventThread);
  // Starts the event and worker threads.
  void Start();

  int port() const;  // the bound port (the one picked, when asked for 0)

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe
