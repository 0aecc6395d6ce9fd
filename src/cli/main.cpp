// moe_ep: the command-line tool. Subcommands live in cmd_*.cpp.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/cli_common.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace moe_ep::cli;
  CLI::App app{"moe_ep: expert-parallel Mixture-of-Experts layer with FP4 expert weights, on the "
               "CPU and on CUDA (SM90).\nExit codes: 0 ok, 1 check failed or runtime error, 2 bad "
               "usage or unsupported request."};
  app.set_version_flag("--version", std::string(MOE_EP_VERSION));
  app.require_subcommand(1);

  const std::vector<Command> commands = {add_info_command(app), add_run_command(app),
                                         add_bench_command(app), add_inspect_command(app)};

  // CLI11 reports a mistyped subcommand as "a subcommand is required" without naming it.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const Command& command : commands) {
      known = known || command.app->check_name(argv[1]);
      names += (names.empty() ? "" : ", ") + command.app->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "moe_ep: error: unknown subcommand '%s'; expected one of: %s (moe_ep --help)\n",
                   argv[1], names.c_str());
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help/version to stdout, errors to stderr
    return code == 0 ? kExitOk : kExitUsage;
  }
  for (const Command& command : commands)
    if (command.app->parsed()) return command.run();
  return kExitUsage;
}
