// Registration functions of the extension's classes (one file each).
#pragma once

#include <nanobind/nanobind.h>

namespace moe_ep::python {

void bind_runtime(nanobind::module_& m);  // runtime.cpp: moe_ep.Runtime
void bind_layer(nanobind::module_& m);    // layer.cpp: moe_ep.Layer

}  // namespace moe_ep::python
