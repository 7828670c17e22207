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
std::string FirstWord(int argc, char** argv) {
  static const std::vector<std::string> with_value = {"--controller", "--token",    "--token-file",
                                                      "--tls-ca",     "--tls-cert", "--tls-key",
                                                      "--timeout"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-", 0) != 0) return a;
    if (std::find(with_value.begin(), with_value.end(), a) != with_value.end()) ++i;
  }
  return "";
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moectl: submit, inspect and control MoE training jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("moectl ") + MOE_VERSION);
  moe::cli::Client client;
  moe::cli::Args args;
  std::string token_file;
  moe::cli::AddConnectionFlags(app, &client, &token_file);
  const std::vector<moe::cli::Command> commands = moe::cli::AddCommands(app, client, &args);
  moe::cli::PlanArgs plan_args;
  CLI::App* plan = moe::cli::AddPlanCommand(app, &plan_args);
  moe::ServiceLogOptions log{"moectl", "warning"};
  moe::AddServiceLogFlags(app, &log);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const std::string word = FirstWord(argc, argv);
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      known |= sub->get_name() == word;
    if (!known && e.get_exit_code() != 0) return UnknownCommand(app, word);
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (moe::Status st = moe::InitServiceLog(log); !st.ok()) return client.Fail(st);
  if (plan->parsed() && !plan_args.live()) return moe::cli::RunPlan(plan_args, nullptr);
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
