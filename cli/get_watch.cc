#include "cli/get_watch.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "cli/client.h"

namespace moe::cli {
namespace {

// The cells of the watched columns, joined: what decides whether a row changed.
std::string WatchedCells(const TableRows& t, const std::vector<std::string>& row,
                         const std::vector<std::string>& watched) {
  std::string key;
  for (size_t i = 0; i < t.header.size() && i < row.size(); ++i) {
    for (const auto& w : watched) {
      if (t.header[i] == w) key += row[i] + "\x1f";
    }
  }
  return key;
}

// The lines of `t` formatted as one table, keyed by their first cell.
std::map<std::string, std::string> Lines(const TableRows& t, std::string* header) {
  std::istringstream in(Table(t.header, t.rows));
  std::string line;
  std::getline(in, *header);
  std::map<std::string, std::string> out;
  for (const auto& row : t.rows) {
    if (!std::getline(in, line)) break;
    out[row.empty() ? "" : row[0]] = line;
  }
  return out;
}

}  // namespace

int WatchTable(const std::function<StatusOr<TableRows>()>& fetch,
               const std::vector<std::string>& watched, double interval, double reconnect_seconds,
               const std::function<int(const Status&)>& fail) {
  std::map<std::string, std::string> seen;  // first cell -> watched cells
  bool first = true;
  Reconnect again(reconnect_seconds);
  while (true) {
    StatusOr<TableRows> t = fetch();
    if (!t.ok()) {
      if (!first && again.Retry(t.status())) continue;
      return fail(t.status());
    }
    again.Reached();
    std::string header;
    const std::map<std::string, std::string> lines = Lines(*t, &header);
    if (first) std::printf("%s\n", header.c_str());
    std::map<std::string, std::string> now;
    for (const auto& row : t->rows) {
      if (row.empty()) continue;
      const std::string cells = WatchedCells(*t, row, watched);
      now[row[0]] = cells;
      auto it = seen.find(row[0]);
      if (it == seen.end() || it->second != cells) std::printf("%s\n", lines.at(row[0]).c_str());
    }
    for (const auto& [key, cells] : seen) {
      if (!now.count(key)) std::printf("%s deleted\n", key.c_str());
    }
    seen = std::move(now);
    first = false;
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
  }
}

int WaitUntilFree(const std::string& worker, const std::function<StatusOr<std::string>()>& busy,
                  double timeout, const std::function<int(const Status&)>& fail) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  std::string said;
  while (true) {
    StatusOr<std::string> job = busy();
    if (!job.ok()) return fail(job.status());
    if (job->empty()) {
      std::printf("%s is free: drained, running nothing\n", worker.c_str());
      return 0;
    }
    if (*job != said) {
      std::printf(
          "waiting for %s's rank of %s to checkpoint at its next step and stop (the job continues "
          "elsewhere)\n",
          worker.c_str(), job->c_str());
      std::fflush(stdout);
      said = *job;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return fail(DeadlineExceededError("drain --wait: " + worker + " still runs " + *job +
                                        " after " + std::to_string(static_cast<int>(timeout)) +
                                        " s (--wait-seconds); it stays drained"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace moe::cli
