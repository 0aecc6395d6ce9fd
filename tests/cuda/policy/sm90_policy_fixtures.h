// Inputs of the SM90 selection policy for tests: the deepseek-v4-flash descriptor, facts where
// every form fits, and the config the policy selects from them (host arithmetic).
#pragma once

#include "cuda/policy/sm90_config.h"

namespace moe_ep::cuda::policytest {

inline MoeDesc flash_desc(Recipe recipe = Recipe::kMxfp4) {
  MoeDesc d;
  d.fleet = {256, 8192, 4096};
  d.recipe = recipe;
  d.intermediate_size = 2048;
  d.top_k = 6;
  d.activation_clamp = 10.0f;
  return d;
}

// Every form fits (one block per SM, three for the split decode), the weights are folded.
inline Sm90Facts all_available() {
  Sm90Facts f;
  f.sm_count = 132;
  f.w13_folded = f.w2_folded = true;
  f.one_token_groups = 2;  // H / 16 = 256 column groups over 132 SMs
  for (const Sm90FormInfo& form : sm90_forms()) {
    const int n = form.k_split > 1 ? 3 : 1;
    f.per_sm(form.form, 0) = n;
    f.per_sm(form.form, 1) = form.has_gemm2 ? n : 0;
  }
  return f;
}

inline Sm90Config selected(const MoeDesc& d, const KernelOverrides& o = {}, const Sm90Facts& f = all_available()) {
  Sm90Config c = select_sm90_load_config(d, o);
  select_sm90_kernels(c, d, o, f);
  return c;
}

}  // namespace moe_ep::cuda::policytest
