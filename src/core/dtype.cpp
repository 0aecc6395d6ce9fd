#include "moe_ep/dtype.h"

#include "check.h"

namespace moe_ep {
namespace {

// DLPack DLDataTypeCode values (dlpack.h v1.1).
constexpr uint8_t kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4;
constexpr uint8_t kDLFloat8_e4m3fn = 10, kDLFloat8_e8m0fnu = 14;

struct DTypeRow {
  DType dtype;
  std::string_view name;
  int64_t size;
  DLTypeCode dl;
};

constexpr DTypeRow kRows[] = {
    {DType::kBF16, "bf16", 2, {kDLBfloat, 16, 1}},
    {DType::kF16, "f16", 2, {kDLFloat, 16, 1}},
    {DType::kF32, "f32", 4, {kDLFloat, 32, 1}},
    {DType::kF64, "f64", 8, {kDLFloat, 64, 1}},
    {DType::kI32, "i32", 4, {kDLInt, 32, 1}},
    {DType::kI64, "i64", 8, {kDLInt, 64, 1}},
    {DType::kU8, "u8", 1, {kDLUInt, 8, 1}},
    {DType::kE4M3, "e4m3", 1, {kDLFloat8_e4m3fn, 8, 1}},
    {DType::kE8M0, "e8m0", 1, {kDLFloat8_e8m0fnu, 8, 1}},
};

const DTypeRow& row(DType dtype) {
  for (const auto& r : kRows)
    if (r.dtype == dtype) return r;
  MOE_EP_FAIL(ErrorCode::kInternal, "unknown dtype value {}", static_cast<int>(dtype));
}

}  // namespace

int64_t dtype_size(DType dtype) { return row(dtype).size; }
// Never throws: messages about a caller's bad dtype value name it instead of failing themselves.
std::string_view dtype_name(DType dtype) {
  for (const auto& r : kRows)
    if (r.dtype == dtype) return r.name;
  return "<not a moe_ep dtype>";
}
DLTypeCode dtype_to_dlpack(DType dtype) { return row(dtype).dl; }

DType dtype_from_dlpack(DLTypeCode code) {
  for (const auto& r : kRows)
    if (r.dl.code == code.code && r.dl.bits == code.bits && r.dl.lanes == code.lanes) return r.dtype;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument,
              "dlpack dtype (code={}, bits={}, lanes={}) is not supported; expected one of bf16, "
              "f16, f32, f64, i32, i64, u8, float8_e4m3fn, float8_e8m0fnu",
              code.code, code.bits, code.lanes);
}

}  // namespace moe_ep
