// `moe_ep bench --ranks R --device cuda`: per T (tokens per rank) the layer time of the R ranks
// and, on the one-GPU simulation, the dispatch and combine kernel times and bandwidths
// (payload bytes moved / kernel time). With R GPUs: one process per GPU like `moe_ep run`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/problem.h"

namespace moe_ep::cli {

struct BenchEpOptions {
  ProblemOptions problem;
  std::vector<int64_t> tokens;
  int ranks = 1;
  bool simulate_ranks_on_one_gpu = false;
  int iters = 0, warmup = -1;
  bool eager = false, json = false;
  std::string csv;
  int64_t timeout_ms = 600000;
  int ep_rank = -1;           // hidden: a launched rank
  std::string ep_rendezvous;  // hidden: its unique-id file prefix (one world per T)
};

bool wants_bench_expert_parallel(const BenchEpOptions& options);
int bench_expert_parallel(const BenchEpOptions& options);

}  // namespace moe_ep::cli
