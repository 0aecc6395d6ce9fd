// Expert-parallel test harness: slices a global problem into per-rank pieces, runs R simulated
// ranks, and computes the single-rank reference on the global batch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/layer_problem.h"
#include "support/sim_ranks.h"

namespace moe_ep::testsupport {

// Experts [first, first + count) of a pack (views into the same memory).
WeightPack slice_experts(const WeightPack& all, int64_t first, int64_t count);
// A weight set whose expert i is expert experts[i] of w, and w's shared expert (copies).
WeightSet gather_experts(const WeightSet& w, const std::vector<int32_t>& experts);

// Rows [begin, begin + count) of an input batch (copies; a/a_scale/a_global when present).
Inputs slice_inputs(const Inputs& in, int64_t begin, int64_t count);
// The rank batches laid end to end (the global batch, rank 0 first).
Inputs concat_inputs(const std::vector<Inputs>& parts);

// Runs `forwards` forwards per rank on a fresh simulated world of R ranks: rank r owns experts
// [r*E/R, (r+1)*E/R) of w and passes per_rank[r] each time; y is NaN-poisoned before each run.
// Returns y per rank (of the last forward); throws a test failure message when a rank threw.
std::vector<HostTensor<uint16_t>> run_ep(const Problem& p, const WeightSet& w, int R,
                                         const std::vector<Inputs>& per_rank, int forwards = 1,
                                         int64_t timeout_ms = 10000);

// y of the single-process CPU layer on `in` (max_tokens raised to in.tokens).
HostTensor<uint16_t> reference_y(const Problem& p, const WeightSet& w, const Inputs& in);

// "" when rank r's y equals rows [offset_r, offset_r + T_r) of ref bit for bit, else the first
// difference (rank, row, column, values).
std::string compare_ranks_bitwise(const std::vector<HostTensor<uint16_t>>& y,
                                  const HostTensor<uint16_t>& ref, int64_t hidden);

// 64-bit FNV-1a of the bytes.
uint64_t hash_bytes(const void* data, size_t bytes, uint64_t seed = 1469598103934665603ull);

}  // namespace moe_ep::testsupport
