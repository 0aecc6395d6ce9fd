#include "cli/cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace moe_ep::test {

CliResult run_cli(const std::string& args) {
  const char* cli = std::getenv("MOE_EP_CLI");
  if (!cli) throw std::runtime_error("MOE_EP_CLI is not set (run the tests through ctest)");
  char err_path[] = "/tmp/moe_ep_cli_stderr_XXXXXX";
  const int fd = mkstemp(err_path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  CliResult r;
  r.command = std::string(cli) + " " + args;
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

}  // namespace moe_ep::test
