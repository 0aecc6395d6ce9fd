// The checkpoints of tests/python/gen_checkpoints.py (written with the `safetensors` package
// from weights quantized by an independent numpy implementation of docs/spec.md §4-5):
//
//   $MOE_EP_TEST_DATA/checkpoints/ckpt/<case>/   checkpoints in each layout
//   $MOE_EP_TEST_DATA/checkpoints/bad/<case>/    one defect each
//   $MOE_EP_TEST_DATA/checkpoints/refused/<case>/  layouts the layer cannot compute (gpt-oss, ...)
//   $MOE_EP_TEST_DATA/checkpoints/ref/<name>.<array>.npy   the same weights, stacked as in
//                                                weights.h, with fp32 sources and dequantized values
//   $MOE_EP_TEST_DATA/checkpoints/manifest.json  written last
//
// ctest writes them with the fixture `checkpoints` before any Checkpoint* test runs. A missing
// file throws std::runtime_error, which gtest reports as a failure (never a skip).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe_ep/recipe.h"
#include "moe_ep/weights.h"
#include "support/host_tensor.h"

namespace moe_ep::testckpt {

std::string data_dir();                        // .../checkpoints
std::string checkpoint_dir(const std::string& name);  // .../ckpt/<name>
std::string bad_dir(const std::string& name);         // .../bad/<name>
std::string refused_dir(const std::string& name);     // .../refused/<name>
const nlohmann::json& manifest();

// ref/<name>.<array>.npy as a flat vector (its dtype must be T's).
template <class T>
std::vector<T> ref_array(const std::string& name, const std::string& array);

// The reference weights of one layer (mx_l1, mx_l2, nv_l1, heavy_l1) in the layout of
// weights.h: what "the layer built from the same weights in memory" gets.
struct RefLayer {
  WeightFormat format = WeightFormat::kMXFP4;
  int64_t E = 0, H = 0, I = 0;
  std::vector<uint8_t> w13, w13_scale, w2, w2_scale;
  std::vector<float> w13_global, w2_global;
  WeightPack pack() const;
};
RefLayer ref_layer(const std::string& name, WeightFormat format);

// Bytes of a contiguous TensorView.
std::vector<uint8_t> bytes_of(const TensorView& t);

// gtest expectations: the two packs hold the same tensors byte for byte; layers of `recipe` built
// from them (E, H, I, K of the manifest, up to 8 experts) give bitwise equal y on seeded inputs.
void expect_same_pack(const WeightPack& got, const WeightPack& want, const std::string& what);
void expect_same_forward(const WeightPack& got, const WeightPack& want, Recipe recipe,
                         const std::string& what);

}  // namespace moe_ep::testckpt
