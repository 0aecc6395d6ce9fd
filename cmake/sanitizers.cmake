# Sanitizer and fuzzing builds (TESTING.md).
#
#   MOE_EP_SANITIZE  comma-separated -fsanitize= list for every C++ target: "address,undefined"
#                    (ASan + UBSan) or "thread" (TSan); empty (default) for none. Every report is
#                    fatal (-fno-sanitize-recover=all), so a test with a finding fails.
#   MOE_EP_FUZZ      build the libFuzzer targets of tests/fuzz (needs clang: -fsanitize=fuzzer);
#                    the library is then instrumented for coverage (-fsanitize=fuzzer-no-link).
#                    With another compiler the option is reported and ignored.
set(MOE_EP_SANITIZE "" CACHE STRING "Sanitizers for every C++ target: address,undefined | thread | empty")
option(MOE_EP_FUZZ "Build the libFuzzer targets of tests/fuzz (clang)" OFF)

if(MOE_EP_SANITIZE)
  if(MOE_EP_SANITIZE MATCHES "thread" AND MOE_EP_SANITIZE MATCHES "address")
    message(FATAL_ERROR "MOE_EP_SANITIZE=${MOE_EP_SANITIZE}: thread and address sanitizers "
                        "cannot be combined; configure two build folders")
  endif()
  set(_moe_ep_san_flags -fsanitize=${MOE_EP_SANITIZE} -fno-sanitize-recover=all
                        -fno-omit-frame-pointer -g)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_moe_ep_san_flags}>")
  add_link_options(-fsanitize=${MOE_EP_SANITIZE})
  message(STATUS "moe_ep: sanitizers ${MOE_EP_SANITIZE}")
endif()

set(MOE_EP_WITH_FUZZ OFF)
if(MOE_EP_FUZZ)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=fuzzer)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer)
  check_cxx_source_compiles(
    "#include <cstddef>\n#include <cstdint>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }"
    MOE_EP_HAS_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(MOE_EP_HAS_LIBFUZZER)
    set(MOE_EP_WITH_FUZZ ON)
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
  else()
    message(WARNING "moe_ep: MOE_EP_FUZZ=ON but ${CMAKE_CXX_COMPILER} has no libFuzzer "
                    "(-fsanitize=fuzzer); configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
endif()
message(STATUS "moe_ep: libFuzzer targets ${MOE_EP_WITH_FUZZ}")
