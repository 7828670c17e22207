// moectl: the command line of MoE Orchestrator, in kubectl's habits.
//
//   moectl submit -f job.yaml            prints the new job's id alone on stdout
//   moectl get jobs | get job ID | get workers | get queues | get racks [-o table|json|yaml|name]
//   moectl describe job ID | describe worker NAME | events ID | watch ID | cancel ID | delete job
//   ID | delete worker NAME | drain NAME | undrain NAME | logs ID | top moectl plan -f job.yaml
//   --cluster NAME [--software NAME] [--sweep N]   offline: no controller moectl plan JOB
//   [--cluster NAME]     a submitted job on the racks its ranks hold
//
// The commands: cli/commands.cc. Exit codes: cli/client.h.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/plan.h"
#include "common/service_log.h"

namespace {

// The first word that is not a global flag or its value: what the user meant as the command.
size_t FirstWordIndex(const std::vector<std::string>& args) {
  static const std::vector<std::string> with_value = {"--controller", "--token",    "--token-file",
                                                      "--tls-ca",     "--tls-cert", "--tls-key",
                                                      "--timeout"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("-", 0) != 0) return i;
    if (std::find(with_value.begin(), with_value.end(), a) != with_value.end()) ++i;
  }
  return args.size();
}
std::string FirstWord(const std::vector<std::string>& args) {
  const size_t i = FirstWordIndex(args);
  return i < args.size() ? args[i] : "";
}

// CLI11 says "A subcommand is required" or "arguments were not expected" for a mistyped command:
// name it, and the commands there are.
int UnknownCommand(const CLI::App& app, const std::string& word) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  if (word.empty()) {
    std::fprintf(stderr, "moectl: a command is required: %s (moectl --help)\n", names.c_str());
  } else {
    std::fprintf(stderr, "moectl: unknown command '%s'; the commands are %s (moectl --help)\n",
                 word.c_str(), names.c_str());
  }
  return 2;
}

// Levenshtein distance, for did-you-mean (short words only).
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0]++;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1)});
      prev = cur;
    }
  }
  return row[b.size()];
}

// `job/A` and `jobs/A` -> `A` for every word from `from` on (get job/A job/B, cancel job/A job/B).
void StripKind(std::vector<std::string>* args, size_t from, const std::string& kind) {
  for (size_t i = from; i < args->size(); ++i) {
    std::string& w = (*args)[i];
    for (const std::string& k : {kind + "/", kind + "s/"}) {
      if (w.rfind(k, 0) == 0) {
        w = w.substr(k.size());
        break;
      }
    }
  }
}

// The choice nearest `what` within two edits ("" when none is).
std::string Nearest(const std::string& what, const std::vector<std::string>& choices) {
  std::string nearest;
  size_t best = 3;
  for (const auto& k : choices) {
    if (const size_t d = Distance(what, k); d < best) best = d, nearest = k;
  }
  return nearest;
}

// kubectl's forms, rewritten into moectl's own before parsing: `get job/ID` and `get jobs/ID` (kind
// and name in one word, several of them), `describe ID ...` (jobs), and `cancel job/ID` where a
// verb takes ids alone. A resource that is none of the verb's is refused with the choices and the
// nearest (exit 2).
bool KubectlForms(const CLI::App& app, std::vector<std::string>* args) {
  const size_t at = FirstWordIndex(*args);
  if (at + 1 >= args->size()) return true;
  const std::string verb = (*args)[at];
  std::string what = (*args)[at + 1];  // a copy: the inserts below may move the vector
  if (what.rfind('-', 0) == 0) return true;
  const size_t slash = what.find('/');
  std::string kind = slash == std::string::npos ? what : what.substr(0, slash);
  if (verb == "cancel" || verb == "events" || verb == "watch" || verb == "logs") {
    StripKind(args, at + 1, "job");
    return true;
  }
  if (verb != "get" && verb != "describe" && verb != "delete") return true;
  const CLI::App* sub = app.get_subcommand(verb);
  std::vector<std::string> kinds;
  for (const CLI::App* k : sub->get_subcommands([](const CLI::App*) { return true; }))
    kinds.push_back(k->get_name());
  if (slash != std::string::npos) {
    if (kind.size() > 1 && kind.back() == 's') kind.pop_back();  // jobs/ID: one job
    const std::string name = what.substr(slash + 1);
    what = kind;
    (*args)[at + 1] = kind;
    args->insert(args->begin() + static_cast<std::ptrdiff_t>(at) + 2, name);
    StripKind(args, at + 3, kind);
  }
  if (std::find(kinds.begin(), kinds.end(), what) != kinds.end()) {
    StripKind(args, at + 2, what);  // get job A job/B
    return true;
  }
  const std::string nearest = Nearest(what, kinds);
  if (verb == "describe" && slash == std::string::npos && nearest.empty()) {  // describe ID: jobs
    args->insert(args->begin() + static_cast<std::ptrdiff_t>(at) + 1, "job");
    StripKind(args, at + 2, "job");
    return true;
  }
  std::string list;
  for (const auto& k : kinds) list += (list.empty() ? "" : ", ") + k;
  std::fprintf(stderr, "moectl %s: unknown resource '%s'%s; the resources are %s\n", verb.c_str(),
               what.c_str(), nearest.empty() ? "" : (" (did you mean '" + nearest + "'?)").c_str(),
               list.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moectl: submit, inspect and control MoE training jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("moectl ") + MOE_VERSION);
  moe::cli::Client client;
  moe::cli::Args args;
  std::string token_file;
  // The config file and the environment first (the flags' defaults); an error in them is reported
  // after parsing, so that --help and `plan` still work beside a broken file.
  const moe::Status defaults = moe::cli::LoadConnectionDefaults(&client, &token_file);
  moe::cli::AddConnectionFlags(app, &client, &token_file);
  const std::vector<moe::cli::Command> commands = moe::cli::AddCommands(app, client, &args);
  moe::cli::PlanArgs plan_args;
  CLI::App* plan = moe::cli::AddPlanCommand(app, &plan_args);
  moe::ServiceLogOptions log{"moectl", "warning"};
  moe::AddServiceLogFlags(app, &log);
  std::vector<std::string> words(argv + 1, argv + argc);
  if (!KubectlForms(app, &words)) return 2;
  try {
    std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 takes them reversed
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const std::string word = FirstWord(words);
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      known |= sub->get_name() == word;
    if (!known && e.get_exit_code() != 0) return UnknownCommand(app, word);
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (moe::Status st = moe::InitServiceLog(log); !st.ok()) return client.Fail(st);
  if (plan->parsed() && !plan_args.live()) return moe::cli::RunPlan(plan_args, nullptr);
  if (!defaults.ok()) return client.Fail(defaults);
  if (!token_file.empty()) {
    auto token = moe::ReadTokenFile(token_file);
    if (!token.ok()) return client.Fail(token.status());
    client.options.token = *token;
  }
  if (moe::Status st = client.Connect(); !st.ok()) return client.Fail(st);
  if (plan->parsed()) return moe::cli::RunPlan(plan_args, &client);
  for (const auto& cmd : commands) {
    if (cmd.app->parsed()) return cmd.run();
  }
  return 2;
}
