#include "cli/workspace_report.h"

#include <fmt/format.h>

#include "testing/presets.h"

namespace moe_ep::cli {
namespace {

WorkspaceShape preset_shape(const testing::Preset& p, int ranks) {
  return {ranks, p.num_experts, p.max_tokens_per_rank, p.hidden_size, p.intermediate_size, p.top_k};
}

}  // namespace

Json workspace_json(const WorkspaceLayout& layout) {
  Json j;
  j["formula"] = workspace_formula();
  j["shape"] = layout.shape.str();
  j["bytes"] = layout.total_bytes;
  Json regions = Json::array();
  for (const WorkspaceRegion& r : layout.regions)
    regions.push_back({{"name", r.name}, {"offset", r.offset}, {"bytes", r.bytes}});
  j["regions"] = regions;
  return j;
}

Json preset_workspaces_json(int ranks) {
  Json j;
  j["formula"] = workspace_formula();
  j["ranks"] = ranks;
  Json per = Json::array();
  for (const testing::Preset& p : testing::presets()) {
    if (p.num_experts % ranks != 0) continue;
    const WorkspaceLayout l = workspace_layout(preset_shape(p, ranks));
    per.push_back({{"preset", p.name}, {"shape", l.shape.str()}, {"workspace_bytes", l.total_bytes}});
  }
  j["presets"] = per;
  return j;
}

void print_preset_workspaces(int ranks) {
  fmt::print("\nsymmetric workspace per rank (one per process, shared by all layers):\n");
  fmt::print("  bytes = {}\n", workspace_formula());
  for (const testing::Preset& p : testing::presets()) {
    if (p.num_experts % ranks != 0) continue;
    const WorkspaceLayout l = workspace_layout(preset_shape(p, ranks));
    fmt::print("  {:<18} {}: {} bytes ({:.1f} MiB)\n", p.name, l.shape.str(), l.total_bytes,
               l.total_bytes / 1048576.0);
  }
}

}  // namespace moe_ep::cli
