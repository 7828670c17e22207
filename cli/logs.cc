#include "cli/logs.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "common/escape.h"

namespace moe::cli {

int Logs(Client& c, const LogsArgs& a) {
  moe::v1::GetLogsRequest req;
  req.set_job_id(a.id);
  req.set_rank(a.rank);
  req.set_attempt(a.attempt);
  req.set_tail_lines(a.tail > 0 ? a.tail : 0);
  bool first = true;
  while (true) {
    moe::v1::GetLogsResponse r;
    if (Status st = c.Call(&moe::v1::JobService::Stub::GetLogs, req, &r); !st.ok())
      return c.Fail(st);
    const std::string text = a.raw ? r.text() : EscapeControl(r.text(), /*keep_newlines=*/true);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    req.set_tail_lines(0);
    req.set_attempt(r.attempt());  // -f stays with the attempt it began with
    const bool advanced = r.next_offset() > req.offset() || first;
    req.set_offset(r.next_offset());
    first = false;
    if (!r.text().empty() && advanced) continue;  // more may be there at once (1 MiB per answer)
    if (!a.follow || r.ended()) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(a.interval));
  }
}

}  // namespace moe::cli
