// moe_ep._route_deepseek_v4: the library's DeepSeek V4 router (include/moe_ep/router.h) on host
// tensors; python/moe_ep/router.py allocates the outputs and picks the device path.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include "moe_ep/router.h"
#include "python/bindings.h"
#include "python/tensor_args.h"

namespace nb = nanobind;

namespace moe_ep::python {

void bind_router(nb::module_& m) {
  m.def(
      "_route_deepseek_v4",
      [](nb::handle logits, nb::handle topk_ids, nb::handle topk_weights, int64_t top_k,
         float routed_scaling_factor, int64_t num_hash_layers, int64_t layer_idx, nb::handle bias,
         nb::handle token_ids, nb::handle hash_table) {
        RouterConfig config;
        ImportedTensor tl = import_required(logits, "logits");
        config.num_experts = tl.view.ndim == 2 ? tl.view.shape[1] : 0;
        config.top_k = top_k;
        config.routed_scaling_factor = routed_scaling_factor;
        config.num_hash_layers = num_hash_layers;
        ImportedTensor ti = import_required(topk_ids, "topk_ids", true);
        ImportedTensor tw = import_required(topk_weights, "topk_weights", true);
        std::optional<ImportedTensor> tb = import_tensor(bias, "bias");
        std::optional<ImportedTensor> tt = import_tensor(token_ids, "token_ids");
        std::optional<ImportedTensor> th = import_tensor(hash_table, "hash_table");
        RouterArgs args;
        args.layer_idx = layer_idx;
        args.logits = tl.view;
        if (tb) args.bias = tb->view;
        if (tt) args.token_ids = tt->view;
        if (th) args.hash_table = th->view;
        args.topk_ids = ti.view;
        args.topk_weights = tw.view;
        nb::gil_scoped_release release;
        check_router_config(config);
        route_deepseek_v4(config, args);
      },
      nb::arg("logits"), nb::arg("topk_ids"), nb::arg("topk_weights"), nb::arg("top_k"),
      nb::arg("routed_scaling_factor"), nb::arg("num_hash_layers"), nb::arg("layer_idx"),
      nb::arg("bias").none(), nb::arg("token_ids").none(), nb::arg("hash_table").none(),
      "The DeepSeek V4 router on host tensors, into topk_ids / topk_weights (use "
      "moe_ep.route_deepseek_v4).");
}

}  // namespace moe_ep::python
