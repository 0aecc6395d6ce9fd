// Python objects -> moe_ep::TensorView, zero-copy through DLPack: through the DLPack C exchange
// API where the object's type has one (torch tensors: no Python code per tensor), else through
// __dlpack__ (nanobind's ndarray): torch tensors (CPU or CUDA), numpy arrays, anything with
// __dlpack__. numpy arrays of the ml_dtypes
// types numpy's DLPack export refuses (bfloat16, float8_e4m3fn, float8_e8m0fnu) are viewed as
// their storage integers and tagged with the element type. Only the library checks shapes,
// strides and devices (one set of messages); the binding refuses what is no tensor at all.
#pragma once

#include <cstdint>
#include <optional>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "moe_ep/tensor.h"

namespace moe_ep::python {

namespace nb = nanobind;

// Holds the imported arrays for the duration of one library call (an exchange-API import holds
// nothing: the view borrows from the caller's object).
struct ImportedTensor {
  nb::ndarray<nb::ro> array;  // inputs: read-only arrays are fine
  nb::ndarray<> writable;     // outputs
  nb::object keepalive;       // the storage view of an ml_dtypes array
  TensorView view;
};

// Throws nb::type_error naming `name` when `obj` is not an array; an empty optional for None.
// `writable`: the library writes it; a read-only array is a ValueError saying so.
std::optional<ImportedTensor> import_tensor(nb::handle obj, const char* name, bool writable = false);
ImportedTensor import_required(nb::handle obj, const char* name, bool writable = false);

// Whether `tensor` imports through the DLPack C exchange API (its type has one and the producer
// describes it): what import_tensor does first.
bool imports_through_exchange_api(nb::handle tensor);

// The current stream of CUDA device `device_index` of the framework that made `tensor`, through
// its DLPack C exchange API; empty when its type has none.
std::optional<void*> exchange_current_stream(nb::handle tensor, int device_index);

// torch's current stream of CUDA device `device_index` (torch._C._cuda_getCurrentRawStream),
// when torch is imported (never imports it); else nullptr, the legacy default stream.
void* torch_current_stream(int device_index);

// The stream of a CUDA call: `stream` when given (a cudaStream_t as int), else the current stream
// of `tensor`'s framework (its DLPack exchange API, else torch's).
void* call_stream(std::optional<uintptr_t> stream, nb::handle tensor, int device_index);

// "cpu", "cuda", "cuda:N" -> Device; kInvalidArgument naming `device` otherwise.
Device parse_device(const std::string& text);

}  // namespace moe_ep::python
