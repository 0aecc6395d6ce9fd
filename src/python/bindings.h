// Registration functions of the extension's classes (one file each).
#pragma once

#include <nanobind/nanobind.h>

namespace moe_ep::python {

void bind_runtime(nanobind::module_& m);  // runtime.cpp: moe_ep.Runtime
void bind_layer(nanobind::module_& m);    // layer.cpp: moe_ep.Layer
void bind_router(nanobind::module_& m);   // router.cpp: moe_ep._route_deepseek_v4, moe_ep.RoutingStage
void bind_checkpoint(nanobind::module_& m);  // checkpoint.cpp: moe_ep._load_checkpoint_layer

}  // namespace moe_ep::python
