// Runs the built moe_ep binary (path in MOE_EP_CLI, set by tests/CMakeLists.txt) as a
// subprocess and captures its exit code, stdout and stderr.
#pragma once

#include <string>

namespace moe_ep::test {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
  std::string command;  // for failure messages
};

// `args` is appended to the binary path unquoted (shell words).
CliResult run_cli(const std::string& args);

}  // namespace moe_ep::test
