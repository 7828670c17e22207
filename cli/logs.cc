#include "cli/logs.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/escape.h"

namespace moe::cli {

namespace {

// One rank's whole output of the attempt (every page), or why there is none.
StatusOr<std::string> RankText(Client& c, const LogsArgs& a, int rank) {
  moe::v1::GetLogsRequest req;
  req.set_job_id(a.id);
  req.set_rank(rank);
  req.set_attempt(a.attempt);
  req.set_tail_lines(a.tail > 0 ? a.tail : 0);
  std::string text;
  while (true) {
    moe::v1::GetLogsResponse r;
    MOE_RETURN_IF_ERROR(c.Call(&moe::v1::JobService::Stub::GetLogs, req, &r));
    text += r.text();
    const bool advanced = r.next_offset() > req.offset();
    req.set_tail_lines(0);
    req.set_attempt(r.attempt());
    req.set_offset(r.next_offset());
    if (r.text().empty() || !advanced) return text;
  }
}

// --all-ranks: every rank's output in rank order, each line prefixed with its rank; a rank whose
// worker cannot answer is said on stderr and the others still print (exit 1 then).
int AllRanks(Client& c, const LogsArgs& a) {
  if (a.follow) {
    return c.Fail(InvalidArgumentError("--all-ranks: not with -f (follow one rank: --rank N)"));
  }
  moe::v1::GetJobRequest get;
  get.set_id(a.id);
  moe::v1::Job job;
  if (Status st = c.Call(&moe::v1::JobService::Stub::GetJob, get, &job); !st.ok())
    return c.Fail(st);
  const int world = static_cast<int>(job.spec().spec().parallelism().world_size());
  int rc = 0;
  for (int rank = 0; rank < world; ++rank) {
    const StatusOr<std::string> text = RankText(c, a, rank);
    if (!text.ok()) {
      std::fprintf(stderr, "moectl logs: rank %d: %s\n", rank, text.status().message().c_str());
      rc = 1;
      continue;
    }
    const std::string shown = a.raw ? *text : EscapeControl(*text, /*keep_newlines=*/true);
    size_t at = 0;
    while (at < shown.size()) {
      const size_t end = std::min(shown.find('\n', at), shown.size());
      std::printf("[rank %d] %.*s\n", rank, static_cast<int>(end - at), shown.data() + at);
      at = end + 1;
    }
  }
  return rc;
}

}  // namespace

int Logs(Client& c, const LogsArgs& a) {
  if (a.all_ranks) return AllRanks(c, a);
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
