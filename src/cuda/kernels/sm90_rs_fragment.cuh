// Where a consumer thread's accumulators lie in the register-operand GEMMs (weight rows on the
// wgmma M side, tokens on N: sm90_rs16_mainloop.cuh, sm90_mxfp4_rs_fp8_mainloop.cuh):
// d[4i + c] is weight row `row` (c = 0, 1) or row + 8 (c = 2, 3) of the n tile's kernel rows,
// token column 8i + 2t + (c & 1) of the m tile.
#pragma once

namespace moe_ep::cuda {

struct RsFragment {
  int row;  // kernel row (0..N) of d[4i + {0, 1}]
  int t;    // lane % 4
  int warp, wg;
};

}  // namespace moe_ep::cuda
