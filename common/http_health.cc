#include "common/http_health.h"

#include <dirent.h>
#include <prometheus/text_serializer.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <utility>

namespace moe {
namespace {

std::mutex probes_mu;
HealthProbes& Probes() {
  static HealthProbes probes;
  return probes;
}

ProbeAnswer Ask(bool ready) {
  std::function<ProbeAnswer()> live, rdy;
  {
    std::lock_guard<std::mutex> lock(probes_mu);
    live = Probes().live;
    rdy = Probes().ready;
  }
  ProbeAnswer a = live ? live() : ProbeAnswer{};
  if (a.ok && ready && rdy) a = rdy();
  if (a.ok && a.detail.empty()) a.detail = "ok";
  return a;
}

HttpResponse ProbePage(bool ready) {
  const ProbeAnswer a = Ask(ready);
  return HttpResponse{a.ok ? 200 : 503, "text/plain; charset=utf-8", a.detail + "\n"};
}

// Like prometheus::Exposer's handler: every collectable's families, serialized at the request.
HttpResponse MetricsPage(const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables) {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : collectables) {
    const auto collectable = weak.lock();
    if (!collectable) continue;
    std::vector<prometheus::MetricFamily> f = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(f.begin()),
                    std::make_move_iterator(f.end()));
  }
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                      prometheus::TextSerializer().Serialize(families)};
}

class LambdaCollector : public prometheus::Collectable {
 public:
  explicit LambdaCollector(std::function<std::vector<prometheus::MetricFamily>()> f)
      : f_(std::move(f)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return f_(); }

 private:
  std::function<std::vector<prometheus::MetricFamily>()> f_;
};

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}

// /proc/self/stat's fields after the command (which may hold spaces and parentheses): index 0 is
// field 3 (state).
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> f;
  for (std::string w; rest >> w;) f.push_back(w);
  return f;
}

double BootTime() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double t = 0;
      in >> t;
      return t;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

int OpenFds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

std::vector<prometheus::MetricFamily> ProcessFamilies() {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  const std::vector<std::string> f = StatFields();
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (f.size() > 21 && tick > 0) {  // utime 14, stime 15, threads 20, start 22, vsize 23, rss 24
    const double cpu = (std::stod(f[11]) + std::stod(f[12])) / tick;
    out.push_back(Family("process_cpu_seconds_total", "User and system CPU time spent in seconds.",
                         MetricType::Counter, cpu));
    out.push_back(Family("process_threads", "Number of OS threads in the process.",
                         MetricType::Gauge, std::stod(f[17])));
    out.push_back(Family("process_start_time_seconds",
                         "Start time of the process since unix epoch in seconds.",
                         MetricType::Gauge, BootTime() + std::stod(f[19]) / tick));
    out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                         MetricType::Gauge, std::stod(f[20])));
    out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                         MetricType::Gauge, std::stod(f[21]) * page));
  }
  if (const int fds = OpenFds(); fds >= 0) {
    out.push_back(
        Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, fds));
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    out.push_back(Family("process_max_fds", "Maximum number of open file descriptors.",
                         MetricType::Gauge, static_cast<double>(lim.rlim_cur)));
  }
  return out;
}

}  // namespace

void SetHealthProbes(HealthProbes probes) {
  std::lock_guard<std::mutex> lock(probes_mu);
  Probes() = std::move(probes);
}

StatusOr<std::unique_ptr<HttpServer>> ServeHealthAndMetrics(
    const std::string& listen, std::vector<std::weak_ptr<prometheus::Collectable>> collectables,
    HttpServerOptions options) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> server, HttpServer::Bind(listen, options));
  // The probes on the event thread: they read flags and must answer even while a page is built.
  server->Handle("/healthz", [] { return ProbePage(false); });
  server->Handle("/readyz", [] { return ProbePage(true); });
  // /metrics on the worker thread: Collect() takes the service's locks (the controller's managers,
  // the agents' state) and a large cluster's page takes a while to write; on the event thread that
  // would hold up every other connection, probes included, for as long.
  server->Handle(
      "/metrics", [collectables = std::move(collectables)] { return MetricsPage(collectables); },
      HttpRunOn::kWorkerThread);
  server->Start();
  return server;
}

std::shared_ptr<prometheus::Collectable> CollectorOf(
    std::function<std::vector<prometheus::MetricFamily>()> collect) {
  return std::make_shared<LambdaCollector>(std::move(collect));
}

std::shared_ptr<prometheus::Collectable> ProcessCollector() { return CollectorOf(ProcessFamilies); }

}  // namespace moe
