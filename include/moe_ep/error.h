// Error type thrown by every public entry point of moe_ep.
#pragma once

#include <stdexcept>
#include <string>

namespace moe_ep {

enum class ErrorCode {
  kInvalidArgument,  // the caller passed a bad value (dtype, shape, option, id, ...)
  kUnsupported,      // valid request this build, device or backend cannot do
  kTimeout,          // a peer never arrived; the message names the rank and the phase
  kRuntime,          // runtime state misuse (released runtime, world mismatch, ...)
  kDevice,           // a CUDA/NCCL call failed or a device-side error flag was raised
  kInternal,         // a broken invariant inside the library
};

const char* error_code_name(ErrorCode code);

// Carries the failing source location so that a report from a user names the statement.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, const char* file, int line, std::string parameter = {});
  ErrorCode code() const noexcept { return code_; }
  // The parameter the error is about, where one is named ("activation_clamp", "weights.format"),
  // so a caller can map it to its own option without reading the message; "" otherwise.
  const std::string& parameter() const noexcept { return parameter_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  // The message without the "file:line" suffix.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
  std::string parameter_;
  const char* file_;
  int line_;
};

}  // namespace moe_ep
