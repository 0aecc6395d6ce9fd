// Internal checking macros. Every failure throws moe_ep::Error with file:line.
#pragma once

#include <fmt/format.h>

#include "moe_ep/error.h"

#define MOE_EP_FAIL(code, ...) \
  throw ::moe_ep::Error((code), ::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

// MOE_EP_CHECK(cond, "fmt", args...): invalid-argument error when cond is false.
#define MOE_EP_CHECK(cond, ...)                                  \
  do {                                                           \
    if (!(cond)) MOE_EP_FAIL(::moe_ep::ErrorCode::kInvalidArgument, __VA_ARGS__); \
  } while (0)

// MOE_EP_CHECK_PARAM(cond, "param", "fmt", args...): invalid-argument error naming the parameter
// (Error::parameter()).
#define MOE_EP_CHECK_PARAM(cond, param, ...)                                                              \
  do {                                                                                                   \
    if (!(cond))                                                                                         \
      throw ::moe_ep::Error(::moe_ep::ErrorCode::kInvalidArgument, ::fmt::format(__VA_ARGS__), __FILE__, \
                            __LINE__, (param));                                                          \
  } while (0)

#define MOE_EP_CHECK_CODE(cond, code, ...)      \
  do {                                          \
    if (!(cond)) MOE_EP_FAIL((code), __VA_ARGS__); \
  } while (0)

// Broken internal invariant: names the expression.
#define MOE_EP_ASSERT(cond)                                                                  \
  do {                                                                                       \
    if (!(cond)) MOE_EP_FAIL(::moe_ep::ErrorCode::kInternal, "internal check failed: {}", #cond); \
  } while (0)
