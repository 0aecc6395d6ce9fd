#include "cli/rank_launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/device_driver.h"
#include "core/check.h"

namespace moe_ep::cli {

RankProcesses make_rank_folder() {
  std::string pattern = (std::filesystem::temp_directory_path() / "moe_ep_ranks.XXXXXX").string();
  MOE_EP_CHECK_CODE(::mkdtemp(pattern.data()) != nullptr, ErrorCode::kRuntime,
                    "cannot create a temporary folder for the rank rendezvous ({})", pattern);
  return {pattern + "/nccl_unique_id", pattern};
}

void require_gpus_for_ranks(int ranks, const std::string& command) {
  std::string status;
  const auto gpus = list_cuda_devices(&status);
  MOE_EP_CHECK_CODE(static_cast<int>(gpus.size()) >= ranks, ErrorCode::kUnsupported,
                    "{} --ranks {} --device cuda runs one process per GPU and needs {} CUDA "
                    "devices; this machine has {}{}. Add --simulate-ranks-on-one-gpu to run the {} "
                    "ranks as simulated ranks on one GPU (the same dispatch/combine kernels, with "
                    "every rank's workspace on that GPU)", command, ranks, ranks, gpus.size(),
                    status.empty() ? "" : " (" + status + ")", ranks);
}

std::vector<Json> run_rank_processes(const RankProcesses& folder,
                                     const std::vector<std::vector<std::string>>& argv_per_rank,
                                     int64_t timeout_ms) {
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  const int R = static_cast<int>(argv_per_rank.size());
  std::vector<pid_t> pids(R, -1);
  std::vector<std::string> outs(R);
  for (int r = 0; r < R; ++r) {
    outs[r] = fmt::format("{}/rank_{}.out", folder.folder, r);
    std::vector<std::string> args = {"/proc/self/exe"};
    args.insert(args.end(), argv_per_rank[r].begin(), argv_per_rank[r].end());
    const pid_t pid = ::fork();
    MOE_EP_CHECK_CODE(pid >= 0, ErrorCode::kRuntime, "fork of rank {} failed", r);
    if (pid == 0) {
      FILE* out = std::freopen(outs[r].c_str(), "w", stdout);
      if (!out) std::_Exit(127);
      std::vector<char*> cargs;
      for (std::string& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      ::execv("/proc/self/exe", cargs.data());
      std::_Exit(127);
    }
    pids[r] = pid;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::vector<int> status(R, -1);
  int left = R;
  while (left > 0) {
    for (int r = 0; r < R; ++r) {
      if (pids[r] < 0) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        pids[r] = -1;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < R; ++r)
        if (pids[r] > 0) {
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], &status[r], 0);
          pids[r] = -1;
        }
      left = 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<Json> results(R);
  std::string failure;
  for (int r = 0; r < R; ++r) {
    std::ifstream in(outs[r]);
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    const bool exited = status[r] >= 0 && WIFEXITED(status[r]);
    const int code = exited ? WEXITSTATUS(status[r]) : -1;
    try {
      results[r] = Json::parse(last);
    } catch (const std::exception&) {
      failure += fmt::format("{}rank {} {} and printed no JSON (last line: '{}')",
                             failure.empty() ? "" : "; ", r,
                             exited ? fmt::format("exited with status {}", code)
                                    : std::string("was killed (timeout or signal)"),
                             last.substr(0, 300));
      continue;
    }
    results[r]["exit_status"] = code;
  }
  std::error_code ec;
  std::filesystem::remove_all(folder.folder, ec);
  MOE_EP_CHECK_CODE(failure.empty(), ErrorCode::kRuntime, "{}", failure);
  return results;
}

}  // namespace moe_ep::cli
