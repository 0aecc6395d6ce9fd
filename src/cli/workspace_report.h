// The symmetric workspace figures `moe_ep info` and `moe_ep run` report.
#pragma once

#include "cli/cli_common.h"
#include "moe_ep/workspace.h"

namespace moe_ep::cli {

// {"formula", "bytes", "shape", "regions": [{name, offset, bytes}, ...]} of one layout.
Json workspace_json(const WorkspaceLayout& layout);
// The formula and, per preset, the workspace of `ranks` ranks at the preset's default
// max_tokens_per_rank.
Json preset_workspaces_json(int ranks);
void print_preset_workspaces(int ranks);

}  // namespace moe_ep::cli
