// The workspace formula and layout (the bytes a forward uses are checked in
// tests/cpu/test_ep_workspace_use.cpp).
#include <gtest/gtest.h>

#include "moe_ep/error.h"
#include "moe_ep/workspace.h"

namespace moe_ep {
namespace {

TEST(WorkspaceLayout, HandComputedTinyShape) {
  // R=2 E=4 T=8 H=64 I=32 K=2: rows 16, slots 32, each region rounded up to 256 bytes.
  const WorkspaceLayout l = workspace_layout({2, 4, 8, 64, 32, 2});
  const int64_t expected_bytes[kNumWorkspaceRegions] = {
      8,                 // recv_counts 4R
      8,                 // expert_counts 4E/R
      64,                // recv_token 4RT
      128,               // recv_slot_expert 4RTK
      128,               // recv_slot_weight 4RTK
      1024,              // recv_codes RTH
      64,                // recv_scales RTH/16
      64,                // recv_global 4RT
      32 * (32 + 2 + 4), // expert_h RTK(I + I/16 + 4)
      2 * 32 * 64,       // expert_out 2RTKH
      2 * 8 * 2 * 64,    // combine 2TKH
  };
  int64_t offset = 0;
  for (int i = 0; i < kNumWorkspaceRegions; ++i) {
    EXPECT_EQ(l.regions[i].bytes, expected_bytes[i]) << l.regions[i].name;
    EXPECT_EQ(l.regions[i].offset, offset) << l.regions[i].name;
    offset += (expected_bytes[i] + 255) / 256 * 256;
  }
  EXPECT_EQ(l.total_bytes, 10240);
  EXPECT_EQ(workspace_bytes(2, 4, 8, 64, 32, 2), 10240);
  EXPECT_EQ(l[WorkspaceRegionId::kRecvCounts].offset, 0);
  EXPECT_EQ(l[WorkspaceRegionId::kCombine].name, "combine");
}

TEST(WorkspaceLayout, RegionsAreAlignedDisjointAndGrowWithEveryDimension) {
  const WorkspaceShape base{4, 16, 64, 256, 128, 4};
  const WorkspaceLayout l = workspace_layout(base);
  for (int i = 0; i < kNumWorkspaceRegions; ++i) {
    EXPECT_EQ(l.regions[i].offset % kWorkspaceAlign, 0) << l.regions[i].name;
    EXPECT_GT(l.regions[i].bytes, 0) << l.regions[i].name;
    const int64_t end = l.regions[i].offset + l.regions[i].bytes;
    const int64_t next = i + 1 < kNumWorkspaceRegions ? l.regions[i + 1].offset : l.total_bytes;
    EXPECT_LE(end, next) << l.regions[i].name;
  }
  const int64_t total = l.total_bytes;
  auto grown = [&](auto edit) {
    WorkspaceShape s = base;
    edit(s);
    return workspace_bytes(s.world_size, s.num_experts, s.max_tokens_per_rank, s.hidden_size,
                           s.intermediate_size, s.top_k);
  };
  EXPECT_GT(grown([](WorkspaceShape& s) { s.world_size = 8; }), total);
  EXPECT_GT(grown([](WorkspaceShape& s) { s.num_experts = 16 * 256; }), total);  // 4 B/expert
  EXPECT_GT(grown([](WorkspaceShape& s) { s.max_tokens_per_rank = 65; }), total);
  EXPECT_GT(grown([](WorkspaceShape& s) { s.hidden_size = 288; }), total);
  EXPECT_GT(grown([](WorkspaceShape& s) { s.intermediate_size = 160; }), total);
  EXPECT_GT(grown([](WorkspaceShape& s) { s.top_k = 5; }), total);
}

TEST(WorkspaceLayout, PresetFigures) {
  // deepseek-v4-flash on 8 ranks with 256 tokens per rank: the figure the CLI reports.
  const int64_t flash = workspace_bytes(8, 256, 256, 4096, 2048, 6);
  EXPECT_EQ(flash, workspace_layout({8, 256, 256, 4096, 2048, 6}).total_bytes);
  // 2RTKH dominates: 8*256*6*4096*2 = 100,663,296 bytes of expert_out.
  EXPECT_GT(flash, 100663296);
  EXPECT_LT(flash, 200000000);
}

TEST(WorkspaceLayout, BadShapesNameTheField) {
  auto msg = [](const WorkspaceShape& s) -> std::string {
    try {
      workspace_layout(s);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(msg({3, 16, 8, 64, 32, 2}).find("num_experts (E) = 16"), std::string::npos);
  EXPECT_NE(msg({2, 16, 0, 64, 32, 2}).find("max_tokens_per_rank (T) = 0"), std::string::npos);
  EXPECT_NE(msg({2, 16, 8, 48, 32, 2}).find("hidden_size (H) = 48"), std::string::npos);
  EXPECT_NE(msg({2, 16, 8, 64, 40, 2}).find("intermediate_size (I) = 40"), std::string::npos);
  EXPECT_NE(msg({2, 16, 8, 64, 32, 0}).find("top_k (K) = 0"), std::string::npos);
  EXPECT_NE(msg({1, 1, int64_t{1} << 40, int64_t{1} << 20, 32, 8}).find("overflows"),
            std::string::npos);
}

TEST(WorkspaceLayout, MisfitNamesTheDimension) {
  const WorkspaceShape have{2, 16, 64, 256, 128, 4};
  EXPECT_EQ(workspace_misfit(have, have), "");
  EXPECT_EQ(workspace_misfit(have, {2, 8, 32, 128, 64, 2}), "");
  EXPECT_NE(workspace_misfit(have, {4, 16, 64, 256, 128, 4}).find("world_size = 4"),
            std::string::npos);
  EXPECT_NE(workspace_misfit(have, {2, 16, 64, 256, 256, 4}).find("intermediate_size = 256 "
                                                                  "exceeds"),
            std::string::npos);
  EXPECT_NE(workspace_misfit(have, {2, 16, 64, 256, 128, 6}).find("top_k = 6 exceeds"),
            std::string::npos);
  const std::string d = describe_workspace(workspace_layout(have));
  EXPECT_NE(d.find("expert_out"), std::string::npos) << d;
}

}  // namespace
}  // namespace moe_ep
