// The workspace formula against the bytes a forward actually uses, cleanliness after each
// forward, and several layers back to back on the one workspace.
#include <gtest/gtest.h>

#include <cstring>

#include "core/runtime_state.h"
#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;
using Region = WorkspaceRegionId;

bool is_count_region(int i) {
  return i == static_cast<int>(Region::kRecvCounts) || i == static_cast<int>(Region::kExpertCounts);
}

// Bytes touched per region of one rank: [first, last) offsets that differ from the poison.
struct Touched {
  int64_t end[kNumWorkspaceRegions] = {};
  bool padding_touched = false;
};

// Worst case: every rank sends T = max_tokens rows with all K slots on rank 0's experts, so rank
// 0 receives R*T rows and R*T*K slots, and every rank gets T*K outputs back.
std::vector<Touched> touched_by_max_load(const std::string& family, uint8_t poison) {
  Problem p = tiny_problem(family);
  p.hidden = 128;
  p.intermediate = 128;
  p.num_experts = 4;
  p.top_k = 3;
  p.max_tokens = 5;
  const WeightSet w = random_weights(p, family == "nvfp4" ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4, 51);
  constexpr int R = 2;
  std::vector<Touched> touched(R);
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r));
    auto layer = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 2, 2), p.overrides);
    const Workspace& ws = *rt->workspace();
    EXPECT_EQ(ws.bytes(), workspace_bytes(R, 4, 5, 128, 128, 3));
    const WorkspaceLayout& l = ws.layout();
    // Poison everything but the count regions, which a forward expects clean.
    for (int i = 0; i < kNumWorkspaceRegions; ++i)
      if (!is_count_region(i)) {
        const int64_t next = i + 1 < kNumWorkspaceRegions ? l.regions[i + 1].offset : l.total_bytes;
        std::memset(ws.base(r) + l.regions[i].offset, poison, next - l.regions[i].offset);
      }
    rt->state().transport().barrier("poisoned");
    Inputs in = random_inputs(p, 5, 90 + r);
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t k = 0; k < 3; ++k) in.set_id(t, k, k % 2);  // experts 0, 1: rank 0
    run_forward(*layer, p, in);
    rt->state().transport().barrier("measured");
    for (int i = 0; i < kNumWorkspaceRegions; ++i) {
      const auto* b = reinterpret_cast<const uint8_t*>(ws.base(r) + l.regions[i].offset);
      const int64_t next = i + 1 < kNumWorkspaceRegions ? l.regions[i + 1].offset : l.total_bytes;
      for (int64_t o = 0; o < next - l.regions[i].offset; ++o) {
        if (is_count_region(i)) {
          EXPECT_EQ(b[o], 0) << l.regions[i].name << " must be zero after a forward (rank " << r << ")";
          continue;
        }
        if (b[o] == poison) continue;
        if (o < l.regions[i].bytes)
          touched[r].end[i] = std::max(touched[r].end[i], o + 1);
        else
          touched[r].padding_touched = true;
      }
    }
  });
  for (auto& o : out) EXPECT_FALSE(o.threw) << outcomes_str(out);
  return touched;
}

TEST(EpWorkspace, FormulaMatchesTheBytesAMaxLoadForwardUses) {
  const WorkspaceLayout l = workspace_layout({2, 4, 5, 128, 128, 3});
  int64_t end[kNumWorkspaceRegions] = {};
  for (const std::string family : {"mxfp4", "nvfp4"})
    for (uint8_t poison : {uint8_t{0xA5}, uint8_t{0x5A}}) {
      const auto touched = touched_by_max_load(family, poison);
      for (size_t r = 0; r < touched.size(); ++r) {
        EXPECT_FALSE(touched[r].padding_touched) << family << " rank " << r;
        for (int i = 0; i < kNumWorkspaceRegions; ++i) end[i] = std::max(end[i], touched[r].end[i]);
      }
    }
  for (int i = 0; i < kNumWorkspaceRegions; ++i) {
    const WorkspaceRegion& region = l.regions[i];
    if (is_count_region(i)) continue;  // written, read and zeroed in each forward
    if (static_cast<Region>(i) == Region::kExpertH) {
      EXPECT_EQ(end[i], 0) << "the CPU backend keeps h in its own scratch";
      continue;
    }
    EXPECT_EQ(end[i], region.bytes) << region.name << ": the worst case must fill the region "
                                       "exactly (formula " << region.bytes << " bytes)";
  }
}

TEST(EpWorkspace, LayersBackToBackOnTheSharedWorkspace) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 8;
  constexpr int R = 4, kLayers = 3;
  std::vector<WeightSet> w;
  for (int l = 0; l < kLayers; ++l) w.push_back(random_weights(p, WeightFormat::kMXFP4, 60 + l));
  std::vector<Inputs> parts;
  for (int r = 0; r < R; ++r) parts.push_back(random_inputs(p, 8 - 2 * r, 70 + r));

  // Reference: the layers chained on the global batch, y of layer l is x of layer l + 1.
  Inputs global = concat_inputs(parts);
  HostTensor<uint16_t> ref;
  for (int l = 0; l < kLayers; ++l) {
    ref = reference_y(p, w[l], global);
    global.x = ref;
  }

  std::vector<HostTensor<uint16_t>> y(R);
  std::vector<int64_t> bytes(R);
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r));
    std::vector<std::unique_ptr<Layer>> layers;
    for (int l = 0; l < kLayers; ++l)
      layers.push_back(Layer::create(rt, p.desc(), slice_experts(w[l].pack(), r * 4, 4), p.overrides));
    bytes[r] = rt->workspace()->bytes();
    Inputs in = parts[r];
    for (int repeat = 0; repeat < 2; ++repeat) {
      in.x = parts[r].x;
      for (auto& layer : layers) {
        y[r] = run_forward(*layer, p, in);
        in.x = y[r];
      }
    }
  });
  for (auto& o : out) ASSERT_FALSE(o.threw) << outcomes_str(out);
  for (int r = 0; r < R; ++r) EXPECT_EQ(bytes[r], workspace_bytes(R, 16, 8, 256, 128, 4));
  EXPECT_EQ(compare_ranks_bitwise(y, ref, p.hidden), "");
}

}  // namespace
}  // namespace moe_ep
