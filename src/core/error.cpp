#include "moe_ep/error.h"

#include <utility>

#include <fmt/format.h>

namespace moe_ep {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kRuntime: return "runtime";
    case ErrorCode::kDevice: return "device";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

Error::Error(ErrorCode code, const std::string& message, const char* file, int line, std::string parameter)
    : std::runtime_error(fmt::format("moe_ep: {} ({}:{})", message, file, line)),
      code_(code),
      message_(message),
      parameter_(std::move(parameter)),
      file_(file),
      line_(line) {}

}  // namespace moe_ep
