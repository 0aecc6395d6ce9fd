// The device workspace layout (slot rows; moe_ep/workspace.h) against a hand computation, and
// its misfit messages.
#include <gtest/gtest.h>

#include "moe_ep/workspace.h"

namespace moe_ep {
namespace {

TEST(DeviceWorkspaceLayout, HandComputedTinyShape) {
  // R=2 E=4 T=8 H=64 I=32 K=2: C = 16 slots per source, S = 32 slot rows.
  const DeviceWorkspaceLayout l = device_workspace_layout({2, 4, 8, 64, 32, 2});
  EXPECT_EQ(l.slots_per_source, 16);
  EXPECT_EQ(l.slot_rows, 32);
  const int64_t expected[kNumDeviceWorkspaceRegions] = {
      64 + 8,       // sync 64 + 4R
      8,            // recv_counts 4R
      128,          // recv_expert 4S
      128,          // recv_weight 4S
      32 * 64,      // recv_codes SH
      32 * 4,       // recv_scales SH/16
      128,          // recv_global 4S
      8 * 64,       // send_codes TH
      8 * 4,        // send_scales TH/16
      32,           // send_global 4T
      2 * 32 * 64,  // expert_out 2SH
      2 * 16 * 64,  // combine 2TKH
  };
  int64_t offset = 0;
  for (int i = 0; i < kNumDeviceWorkspaceRegions; ++i) {
    EXPECT_EQ(l.regions[i].bytes, expected[i]) << l.regions[i].name;
    EXPECT_EQ(l.regions[i].offset, offset) << l.regions[i].name;
    offset += (expected[i] + 255) / 256 * 256;
  }
  EXPECT_EQ(l.total_bytes, offset);
  EXPECT_EQ(l[DeviceWorkspaceRegionId::kCombine].name, "combine");
  EXPECT_NE(describe_device_workspace(l).find("expert_out"), std::string::npos);
  EXPECT_NE(std::string(device_workspace_formula()).find("S = R*T*K"), std::string::npos);
}

TEST(DeviceWorkspaceLayout, GrowsWithEveryDimensionButIAndMisfitsNameTheDimension) {
  const WorkspaceShape base{4, 16, 64, 256, 128, 4};
  const int64_t total = device_workspace_layout(base).total_bytes;
  auto with = [&](auto edit) {
    WorkspaceShape s = base;
    edit(s);
    return device_workspace_layout(s).total_bytes;
  };
  EXPECT_GT(with([](WorkspaceShape& s) { s.world_size = 8; }), total);
  EXPECT_GT(with([](WorkspaceShape& s) { s.max_tokens_per_rank = 65; }), total);
  EXPECT_GT(with([](WorkspaceShape& s) { s.hidden_size = 288; }), total);
  EXPECT_GT(with([](WorkspaceShape& s) { s.top_k = 5; }), total);
  // h lives in the local layer's own scratch: I does not size the device workspace.
  EXPECT_EQ(with([](WorkspaceShape& s) { s.intermediate_size = 4096; }), total);
  EXPECT_EQ(device_workspace_misfit(base, {4, 16, 32, 256, 128, 4}), "");
  const std::string m = device_workspace_misfit(base, {4, 16, 65, 256, 128, 4});
  EXPECT_NE(m.find("max_tokens_per_rank = 65 exceeds"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(total) + " bytes there"), std::string::npos) << m;
}

}  // namespace
}  // namespace moe_ep
