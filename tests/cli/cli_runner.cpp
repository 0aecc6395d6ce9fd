#include "cli/cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

namespace moe_ep::test {

namespace {

// MOE_EP_CLI when set; else the build's layout: <build>/tests/moe_ep_tests next to <build>/moe_ep.
std::string cli_path() {
  if (const char* env = std::getenv("MOE_EP_CLI")) return env;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string path(exe, static_cast<size_t>(n));
    for (int up = 0; up < 2 && path.rfind('/') != std::string::npos; ++up) path.erase(path.rfind('/'));
    path += "/moe_ep";
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  throw std::runtime_error("MOE_EP_CLI is not set and no moe_ep binary was found next to the "
                           "test binary's folder; build the moe_ep_cli target");
}

}  // namespace

CliResult run_cli(const std::string& args) {
  const std::string cli = cli_path();
  char err_path[] = "/tmp/moe_ep_cli_stderr_XXXXXX";
  const int fd = mkstemp(err_path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  CliResult r;
  r.command = cli + " " + args;
  FILE* pipe = popen((r.command + " 2>" + err_path).c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + r.command);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  std::remove(err_path);
  return r;
}

std::string describe(const CliResult& r) {
  return "command: " + r.command + "\nexit code: " + std::to_string(r.exit_code) +
         "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

nlohmann::json parse_json(const CliResult& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not one JSON object: " << e.what() << "\n" << describe(r);
  }
  return {};
}

}  // namespace moe_ep::test
