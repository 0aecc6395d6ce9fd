// Python objects -> moe_ep::TensorView, zero-copy through DLPack (nanobind's ndarray): torch
// tensors (CPU or CUDA), numpy arrays, anything with __dlpack__. numpy arrays of the ml_dtypes
// types numpy's DLPack export refuses (bfloat16, float8_e4m3fn, float8_e8m0fnu) are viewed as
// their storage integers and tagged with the element type. Only the library checks shapes,
// strides and devices (one set of messages); the binding refuses what is no tensor at all.
#pragma once

#include <optional>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "moe_ep/tensor.h"

namespace moe_ep::python {

namespace nb = nanobind;

// Holds the imported arrays for the duration of one library call.
struct ImportedTensor {
  nb::ndarray<> array;
  nb::object keepalive;  // the storage view of an ml_dtypes array
  TensorView view;
};

// Throws nb::type_error naming `name` when `obj` is not an array; an empty optional for None.
std::optional<ImportedTensor> import_tensor(nb::handle obj, const char* name);
ImportedTensor import_required(nb::handle obj, const char* name);

// "cpu", "cuda", "cuda:N" -> Device; kInvalidArgument naming `device` otherwise.
Device parse_device(const std::string& text);

}  // namespace moe_ep::python
