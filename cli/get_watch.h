// moectl get -w (kubectl's watch of a list) and drain --wait: polls of the controller that print as
// things change.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/format.h"
#include "common/status.h"

namespace moe::cli {

// The table once, then a row each time a row's watched columns (`watched`, by header name: STATE,
// RESTARTS, ...) change or a new row appears, polling `fetch` every `interval` seconds until
// interrupted or a poll fails (a controller that cannot be reached is awaited for up to
// `reconnect_seconds`, as Reconnect says). A row that disappears prints as "<first cell> deleted".
int WatchTable(const std::function<StatusOr<TableRows>()>& fetch,
               const std::vector<std::string>& watched, double interval, double reconnect_seconds,
               const std::function<int(const Status&)>& fail);

// Waits until `busy()` says the worker runs nothing (it returns the job it still runs, or ""), at
// most `timeout` seconds, printing what it waits for once and again when that changes.
int WaitUntilFree(const std::string& worker, const std::function<StatusOr<std::string>()>& busy,
                  double timeout, const std::function<int(const Status&)>& fail);

}  // namespace moe::cli
