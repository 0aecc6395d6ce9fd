// The subcommands of `moe_ep`; each file cmd_<name>.cpp registers one.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace moe_ep::cli {

// A subcommand registered on the app; run() executes it after parsing and returns the process
// exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_info_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);  // cmd_inspect.cpp

}  // namespace moe_ep::cli
