// One process per GPU for `moe_ep run|bench --ranks R --device cuda`: the tool starts itself R
// times (fork + exec of /proc/self/exe) with the rank's arguments, each child printing one JSON
// object on stdout, and collects them. The children meet through a unique-id file in a fresh
// temporary folder (removed afterwards).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/cli_common.h"

namespace moe_ep::cli {

struct RankProcesses {
  std::string rendezvous;  // the unique-id file path the children get (--ep-rendezvous)
  std::string folder;      // the temporary folder holding it and the children's stdout
};

// A fresh temporary folder and the rendezvous path inside it.
RankProcesses make_rank_folder();

// Starts one child per entry of `argv_per_rank` (arguments after the program name), waits for
// all of them at most `timeout_ms` (then kills the rest) and returns each child's last stdout
// line parsed as JSON. Throws kRuntime naming the rank, its exit status and its output's end
// when a child fails or prints no JSON. NCCL_NVLS_ENABLE=0 is set for the children unless the
// environment sets it. Removes the folder.
std::vector<Json> run_rank_processes(const RankProcesses& folder,
                                     const std::vector<std::vector<std::string>>& argv_per_rank,
                                     int64_t timeout_ms);

// The CUDA devices visible here; throws kUnsupported when fewer than `ranks`, suggesting the
// one-GPU simulation flag.
void require_gpus_for_ranks(int ranks, const std::string& command);

}  // namespace moe_ep::cli
