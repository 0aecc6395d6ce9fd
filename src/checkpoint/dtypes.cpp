#include "checkpoint/dtypes.h"

#include <utility>

namespace moe_ep::checkpoint {
namespace {

constexpr std::pair<std::string_view, int> kDTypes[] = {
    {"BOOL", 8}, {"U8", 8},   {"I8", 8},   {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"F8_E8M0", 8},
    {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32}, {"I64", 64}, {"U64", 64}, {"F64", 64},    {"F4", 4},
};

}  // namespace

int safetensors_element_bits(std::string_view dtype) {
  for (const auto& [name, bits] : kDTypes)
    if (name == dtype) return bits;
  return 0;
}

std::string known_safetensors_dtypes() {
  std::string out;
  for (const auto& [name, bits] : kDTypes) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace moe_ep::checkpoint
