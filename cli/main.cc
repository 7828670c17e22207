// moectl: the command line of MoE Orchestrator, in kubectl's habits.
//
//   moectl submit -f job.yaml            prints the new job's id alone on stdout
//   moectl get jobs | get job ID [-o table|json|yaml] | get workers
//   moectl describe job ID | watch ID | cancel ID | delete job ID | delete worker NAME | drain NAME | undrain NAME | top
//   moectl plan -f job.yaml --cluster NAME [--software NAME] [--sweep N]   offline: no controller
//   moectl plan JOB [--cluster NAME]     a submitted job on the racks its ranks hold
//
// The commands: cli/commands.cc. Exit codes: cli/client.h.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/plan.h"

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
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
