#include "checkpoint/checkpoint_test_data.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "core/test_formats_vector_file.h"
#include "moe_ep/quant.h"

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

}  // namespace

std::string data_dir() {
  const char* root = std::getenv("MOE_EP_TEST_DATA");
  if (!root) fail("MOE_EP_TEST_DATA is not set: missing checkpoint test data");
  return std::string(root) + "/checkpoints";
}

std::string checkpoint_dir(const std::string& name) { return data_dir() + "/ckpt/" + name; }
std::string bad_dir(const std::string& name) { return data_dir() + "/bad/" + name; }

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

}  // namespace moe_ep::testckpt
