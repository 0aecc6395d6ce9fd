// Flags of `moe_ep run`. The expert-parallel flags (--ranks, --layers, --eplb-redundant,
// --router) are parsed already; run_plan() refuses what is not implemented yet.
#pragma once

#include <cstdint>
#include <string>

#include "cli/problem.h"

namespace moe_ep::cli {

struct RunOptions {
  ProblemOptions problem;
  int64_t tokens = 128;       // T per rank
  bool check = true;
  bool json = false;
  int iters = 0;              // timed forwards; 0: 20 on CUDA, 1 on the CPU
  int warmup = -1;            // untimed forwards before timing; -1: 3 on CUDA, 0 on the CPU
  bool eager = false;         // CUDA: time eager calls instead of graph replays
  int64_t check_rows = 256;   // at most this many rows are compared with the reference
  int64_t corrupt_row = -1;   // hidden, for the tool's own tests: perturb this row of y before
                              // the check, which must then fail
  // expert parallelism
  int ranks = 1;              // simulated ranks (CPU) / EP ranks
  int layers = 1;             // layers run back to back on the shared workspace
  int64_t eplb_redundant = 0; // redundant physical experts (EPLB)
  bool router = false;        // DeepSeek V4 router on synthetic logits before the layer
  bool shared_expert = false; // a synthetic bf16 shared expert added to every layer's y (--device cuda)
  bool time_without_shared = false;  // bench: also time the chain's layers without it (its added cost)
  int64_t hash_layers = 0;    // --router: the first hash_layers layers route by a synthetic [vocab, K] table
  int64_t timeout_ms = 600000; // simulated ranks: bound on every wait for a peer
  // expert parallelism on GPUs (cli/cmd_run_ep_cuda.cpp)
  bool simulate_ranks_on_one_gpu = false;  // R simulated ranks on the one --device GPU
  bool nccl = false;          // one process per GPU through NCCL, also for --ranks 1
  int ep_rank = -1;           // hidden: this process is rank ep_rank of a launched world
  std::string ep_rendezvous;  // hidden: that world's unique-id file
};

}  // namespace moe_ep::cli
