// moectl's commands and their flags (CLI11), one function per command.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/logs.h"

namespace moe::cli {

// Every command's arguments.
struct Args {
  std::string file, output = "table", id, name, watch_output = "text", name_prefix;
  std::string selector;             // get jobs -l
  std::vector<std::string> states;  // get jobs --state, cancel/delete --state
  std::vector<std::string> ids;     // get job, describe job, cancel, delete job: ids or names
  std::string job_name;             // cancel/delete --name: jobs of this metadata.name
  double refresh = 2;
  double reconnect_seconds =
      600;  // watch, get -w, events -w: how long a lost controller is awaited
  bool once = false;
  bool now = false;   // cancel --now
  bool wait = false;  // drain --wait
  double wait_seconds = 600;
  bool watch_list = false;      // get jobs|workers -w
  bool resume_by_name = false;  // submit --resume-by-name
  LogsArgs logs;
};

// A subcommand and what it runs once parsed.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// --controller, --token, --token-file, TLS and --timeout, with $MOE_CONTROLLER, $MOE_TOKEN and
// $MOE_TOKEN_FILE as defaults. `token_file` receives the file to read once flags are parsed.
void AddConnectionFlags(CLI::App& app, Client* c, std::string* token_file);
// Every subcommand, bound to `c` and `a` (which must outlive the returned commands).
std::vector<Command> AddCommands(CLI::App& app, Client& c, Args* a);

}  // namespace moe::cli
