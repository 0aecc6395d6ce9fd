# The C++ dependencies and where they come from. Every one is found the ordinary way first
# (a system package, or CMAKE_PREFIX_PATH); the Python build (pip install ., SKBUILD) looks
# first in its build requirements from PyPI (pyproject.toml), so a wheel builds with only
# Python, a C++ compiler and, for the CUDA backend, the CUDA toolkit:
#   fmt            PyPI cmeel-fmt (headers + CMake config), used header-only in the wheel
#                  (MOE_EP_FMT_HEADER_ONLY) so the extension carries no libfmt.so
#   nlohmann_json  PyPI nlohmann-json (headers only)
#   CLI11          the command-line tool only (MOE_EP_BUILD_CLI); Debian's libcli11-dev
#   NCCL headers   the CUDA toolkit's, else those of PyPI's nvidia-nccl-cu12/13 (the NCCL torch
#                  brings) where the Python sees them (CMakeLists.txt, MOE_EP_NCCL)
# A dependency found nowhere stops the configure with the package that provides it.

# Directories of a Python's import path that hold a PyPI package's headers.
function(moe_ep_python_dep_dirs out)
  set(dirs)
  set(py "${Python_EXECUTABLE}")
  if(NOT py)
    find_program(MOE_EP_DEP_PYTHON NAMES python3 python)
    set(py "${MOE_EP_DEP_PYTHON}")
  endif()
  if(py)
    execute_process(
      COMMAND "${py}" -c [=[
import os, sys
for p in sys.path:
    for sub in ("cmeel.prefix", "nlohmann_json", os.path.join("nvidia", "nccl")):
        d = os.path.join(p or ".", sub)
        if os.path.isdir(d):
            print(os.path.abspath(d))
]=]
      OUTPUT_VARIABLE found OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(found)
      string(REPLACE "\n" ";" dirs "${found}")
    endif()
  endif()
  set(${out} "${dirs}" PARENT_SCOPE)
endfunction()

moe_ep_python_dep_dirs(MOE_EP_PYTHON_DEP_DIRS)
set(_moe_ep_cmeel_prefixes)
set(_moe_ep_json_hints)
set(MOE_EP_PYTHON_NCCL_HINTS)  # NCCL headers of PyPI's nvidia-nccl-cu12/13 (torch's NCCL)
foreach(d ${MOE_EP_PYTHON_DEP_DIRS})
  if(d MATCHES "cmeel\\.prefix$")
    list(APPEND _moe_ep_cmeel_prefixes "${d}")
  elseif(d MATCHES "nccl$")
    list(APPEND MOE_EP_PYTHON_NCCL_HINTS "${d}/include")
  else()
    list(APPEND _moe_ep_json_hints "${d}/include")
  endif()
endforeach()

# ---- fmt ----
if(SKBUILD)
  # The build requirement first: the same fmt for every wheel, whatever the system has.
  find_package(fmt CONFIG QUIET PATHS ${_moe_ep_cmeel_prefixes} NO_DEFAULT_PATH)
endif()
if(NOT fmt_FOUND)
  find_package(fmt CONFIG QUIET)
endif()
if(NOT fmt_FOUND AND _moe_ep_cmeel_prefixes)
  find_package(fmt CONFIG QUIET PATHS ${_moe_ep_cmeel_prefixes} NO_DEFAULT_PATH)
  set(MOE_EP_FMT_HEADER_ONLY ON)  # the PyPI package's libfmt.so is not on the loader's path
endif()
if(NOT fmt_FOUND)
  message(FATAL_ERROR "moe_ep: the fmt library was not found: install Debian's libfmt-dev "
                      "(apt-get install libfmt-dev), or its headers from PyPI "
                      "(python3 -m pip install cmeel-fmt), or set CMAKE_PREFIX_PATH to an fmt install")
endif()
if(MOE_EP_FMT_HEADER_ONLY)
  set(MOE_EP_FMT fmt::fmt-header-only)
else()
  set(MOE_EP_FMT fmt::fmt)
endif()
message(STATUS "moe_ep: fmt ${fmt_VERSION} (${MOE_EP_FMT}) from ${fmt_DIR}")

# ---- nlohmann_json (headers only) ----
find_package(nlohmann_json 3 CONFIG QUIET)
if(NOT nlohmann_json_FOUND)
  find_path(MOE_EP_NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp HINTS ${_moe_ep_json_hints})
  if(NOT MOE_EP_NLOHMANN_JSON_INCLUDE_DIR)
    message(FATAL_ERROR "moe_ep: nlohmann-json was not found: install Debian's nlohmann-json3-dev "
                        "(apt-get install nlohmann-json3-dev), or its headers from PyPI "
                        "(python3 -m pip install nlohmann-json)")
  endif()
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
                        INTERFACE_INCLUDE_DIRECTORIES "${MOE_EP_NLOHMANN_JSON_INCLUDE_DIR}")
  message(STATUS "moe_ep: nlohmann_json headers from ${MOE_EP_NLOHMANN_JSON_INCLUDE_DIR}")
endif()

# ---- CLI11 (the command-line tool only) ----
if(MOE_EP_BUILD_CLI)
  find_package(CLI11 CONFIG QUIET)
  if(NOT CLI11_FOUND)
    message(FATAL_ERROR "moe_ep: CLI11 (for the command-line tool) was not found: install Debian's "
                        "libcli11-dev (apt-get install libcli11-dev), or configure with "
                        "-DMOE_EP_BUILD_CLI=OFF to build the library without the tool")
  endif()
endif()
