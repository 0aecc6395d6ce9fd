#include "checkpoint/checkpoint_test_data.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/test_formats_vector_file.h"
#include "moe_ep/layer.h"
#include "moe_ep/quant.h"
#include "support/layer_problem.h"

namespace moe_ep::testckpt {
namespace {

constexpr const char* kHowToMake =
    "the checkpoints are written by tests/python/gen_checkpoints.py, which ctest runs as the "
    "fixture 'checkpoints' (it needs `python3 -m pip install -r tests/python/requirements.txt`); "
    "to run the test binary by hand: python3 tests/python/gen_checkpoints.py DIR/checkpoints and "
    "MOE_EP_TEST_DATA=DIR";

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(fmt::format("{}; {}", what, kHowToMake));
}

template <class T>
constexpr const char* descr();
template <> constexpr const char* descr<uint8_t>() { return "|u1"; }
template <> constexpr const char* descr<uint16_t>() { return "<u2"; }
template <> constexpr const char* descr<float>() { return "<f4"; }
template <> constexpr const char* descr<int64_t>() { return "<i8"; }

}  // namespace

std::string data_dir() {
  const char* root = std::getenv("MOE_EP_TEST_DATA");
  if (!root) fail("MOE_EP_TEST_DATA is not set: missing checkpoint test data");
  return std::string(root) + "/checkpoints";
}

std::string checkpoint_dir(const std::string& name) { return data_dir() + "/ckpt/" + name; }
std::string bad_dir(const std::string& name) { return data_dir() + "/bad/" + name; }
std::string refused_dir(const std::string& name) { return data_dir() + "/refused/" + name; }

const nlohmann::json& manifest() {
  static const nlohmann::json m = [] {
    const std::string path = data_dir() + "/manifest.json";
    std::ifstream in(path);
    if (!in) fail(fmt::format("missing checkpoint test data '{}'", path));
    return nlohmann::json::parse(in);
  }();
  return m;
}

template <class T>
std::vector<T> ref_array(const std::string& name, const std::string& array) {
  const std::string path = fmt::format("{}/ref/{}.{}.npy", data_dir(), name, array);
  if (!std::ifstream(path)) fail(fmt::format("missing checkpoint test data '{}'", path));
  const testvectors::NpyArray a = testvectors::read_npy(path);
  if (a.descr != descr<T>())
    throw std::runtime_error(fmt::format("'{}' holds dtype '{}', the test reads '{}'", path, a.descr,
                                         descr<T>()));
  std::vector<T> out(static_cast<size_t>(a.size()));
  std::memcpy(out.data(), a.bytes.data(), a.bytes.size());
  return out;
}

template std::vector<uint8_t> ref_array<uint8_t>(const std::string&, const std::string&);
template std::vector<uint16_t> ref_array<uint16_t>(const std::string&, const std::string&);
template std::vector<float> ref_array<float>(const std::string&, const std::string&);
template std::vector<int64_t> ref_array<int64_t>(const std::string&, const std::string&);

RefLayer ref_layer(const std::string& name, WeightFormat format) {
  RefLayer r;
  r.format = format;
  r.E = manifest().at("E");
  r.H = manifest().at("H");
  r.I = manifest().at("I");
  r.w13 = ref_array<uint8_t>(name, "w13");
  r.w13_scale = ref_array<uint8_t>(name, "w13_scale");
  r.w2 = ref_array<uint8_t>(name, "w2");
  r.w2_scale = ref_array<uint8_t>(name, "w2_scale");
  if (format == WeightFormat::kNVFP4) {
    r.w13_global = ref_array<float>(name, "w13_global");
    r.w2_global = ref_array<float>(name, "w2_global");
  }
  return r;
}

WeightPack RefLayer::pack() const {
  auto view = [](const auto& v, DType dtype, std::vector<int64_t> shape) {
    return testsupport::view_of(const_cast<void*>(static_cast<const void*>(v.data())), dtype, shape);
  };
  const int64_t B = format == WeightFormat::kNVFP4 ? kNvBlock : kMxBlock;
  const DType sd = format == WeightFormat::kNVFP4 ? DType::kE4M3 : DType::kE8M0;
  WeightPack p;
  p.format = format;
  p.w13 = view(w13, DType::kU8, {E, 2 * I, H / 2});
  p.w13_scale = view(w13_scale, sd, {E, 2 * I, H / B});
  p.w2 = view(w2, DType::kU8, {E, H, I / 2});
  p.w2_scale = view(w2_scale, sd, {E, H, I / B});
  if (format == WeightFormat::kNVFP4) {
    p.w13_global = view(w13_global, DType::kF32, {E, 2});
    p.w2_global = view(w2_global, DType::kF32, {E});
  }
  return p;
}

std::vector<uint8_t> bytes_of(const TensorView& t) {
  if (!t.defined()) return {};
  const auto* p = static_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + t.nbytes());
}

void expect_same_pack(const WeightPack& got, const WeightPack& want, const std::string& what) {
  EXPECT_EQ(got.format, want.format) << what;
  const std::pair<const char*, std::pair<const TensorView*, const TensorView*>> tensors[] = {
      {"w13", {&got.w13, &want.w13}},           {"w13_scale", {&got.w13_scale, &want.w13_scale}},
      {"w13_global", {&got.w13_global, &want.w13_global}}, {"w2", {&got.w2, &want.w2}},
      {"w2_scale", {&got.w2_scale, &want.w2_scale}}, {"w2_global", {&got.w2_global, &want.w2_global}}};
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(t.first->shape_str(), t.second->shape_str()) << what << " " << name;
    EXPECT_EQ(t.first->dtype, t.second->dtype) << what << " " << name;
    EXPECT_TRUE(bytes_of(*t.first) == bytes_of(*t.second)) << what << " " << name << " bytes differ";
  }
}

void expect_same_forward(const WeightPack& got, const WeightPack& want, Recipe recipe,
                         const std::string& what) {
  testsupport::Problem p;
  p.recipe = recipe;
  p.num_experts = 8;
  p.hidden = manifest().at("H");
  p.intermediate = manifest().at("I");
  p.top_k = manifest().at("top_k");
  p.max_tokens = 48;
  auto runtime = testsupport::cpu_runtime();
  auto a = Layer::create(runtime, p.desc(), got, p.overrides);
  auto b = Layer::create(runtime, p.desc(), want, p.overrides);
  for (uint64_t seed : {1u, 2u}) {
    const testsupport::Inputs in = testsupport::random_inputs(p, 37, seed, {0.1});
    const auto ya = testsupport::run_forward(*a, p, in);
    const auto yb = testsupport::run_forward(*b, p, in);
    EXPECT_TRUE(ya.values() == yb.values()) << what << " seed " << seed << ": y differs";
    int64_t nonzero = 0;
    for (uint16_t v : ya.values()) nonzero += (v & 0x7FFF) != 0;
    EXPECT_GT(nonzero, 0) << what;  // a forward of zeros would match trivially
  }
}

}  // namespace moe_ep::testckpt
