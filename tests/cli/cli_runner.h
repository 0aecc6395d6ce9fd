// Runs the built moe_ep binary (path in MOE_EP_CLI, set by tests/CMakeLists.txt) as a
// subprocess and captures its exit code, stdout and stderr.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moe_ep::test {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
  std::string command;  // for failure messages
};

// `args` is appended to the binary path unquoted (shell words).
CliResult run_cli(const std::string& args);

// The command, exit code, stdout and stderr, for failure messages.
std::string describe(const CliResult& r);
// stdout as one JSON object; a test failure naming the output when it is not.
nlohmann::json parse_json(const CliResult& r);

}  // namespace moe_ep::test
