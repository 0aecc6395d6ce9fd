#include "cuda/nccl/nccl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"

#ifndef MOE_EP_NCCL_COMPILED_VERSION
#define MOE_EP_NCCL_COMPILED_VERSION "unknown"
#endif
#ifndef MOE_EP_NCCL_FALLBACK_LIBRARY
#define MOE_EP_NCCL_FALLBACK_LIBRARY ""
#endif

namespace moe_ep::cuda::nccl {
namespace {

struct Loaded {
  NcclApi api;
  std::string error;  // non-empty: unusable, and why
};

template <class Fn>
bool bind(void* lib, const char* name, Fn& fn, std::string* missing) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (!fn) *missing += fmt::format("{}{}", missing->empty() ? "" : ", ", name);
  return fn != nullptr;
}

Loaded load() {
  Loaded out;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("MOE_EP_NCCL_LIBRARY"); env && *env) candidates.emplace_back(env);
  candidates.emplace_back("libnccl.so.2");
  if (std::string(MOE_EP_NCCL_FALLBACK_LIBRARY).size()) candidates.emplace_back(MOE_EP_NCCL_FALLBACK_LIBRARY);
  void* lib = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      out.api.path = c;
      break;
    }
    const char* why = ::dlerror();
    tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", c, why ? why : "not found");
  }
  if (!lib) {
    out.error = fmt::format("libnccl.so.2 could not be opened ({}); set LD_LIBRARY_PATH to the "
                            "folder of an NCCL 2.28 library or MOE_EP_NCCL_LIBRARY to the file",
                            tried);
    return out;
  }
  char where[4096] = {};
  if (::dlinfo(lib, RTLD_DI_ORIGIN, where) == 0 && where[0])
    out.api.path = fmt::format("{}/{}", where, out.api.path.substr(out.api.path.rfind('/') + 1));
  NcclApi& a = out.api;
  std::string missing;
  bind(lib, "ncclGetVersion", a.GetVersion, &missing);
  bind(lib, "ncclGetErrorString", a.GetErrorString, &missing);
  bind(lib, "ncclGetLastError", a.GetLastError, &missing);
  bind(lib, "ncclGetUniqueId", a.GetUniqueId, &missing);
  bind(lib, "ncclCommInitRankConfig", a.CommInitRankConfig, &missing);
  bind(lib, "ncclCommGetAsyncError", a.CommGetAsyncError, &missing);
  bind(lib, "ncclCommAbort", a.CommAbort, &missing);
  bind(lib, "ncclCommFinalize", a.CommFinalize, &missing);
  bind(lib, "ncclCommDestroy", a.CommDestroy, &missing);
  bind(lib, "ncclCommCount", a.CommCount, &missing);
  bind(lib, "ncclCommUserRank", a.CommUserRank, &missing);
  bind(lib, "ncclCommCuDevice", a.CommCuDevice, &missing);
  bind(lib, "ncclMemAlloc", a.MemAlloc, &missing);
  bind(lib, "ncclMemFree", a.MemFree, &missing);
  bind(lib, "ncclCommWindowRegister", a.CommWindowRegister, &missing);
  bind(lib, "ncclCommWindowDeregister", a.CommWindowDeregister, &missing);
  bind(lib, "ncclDevCommCreate", a.DevCommCreate, &missing);
  bind(lib, "ncclDevCommDestroy", a.DevCommDestroy, &missing);
  bind(lib, "ncclAllGather", a.AllGather, &missing);
  if (a.GetVersion) a.GetVersion(&a.version);
  const int major = a.version / 10000, minor = a.version % 10000 / 100;
  if (a.version < 22800 || major != NCCL_MAJOR || minor != NCCL_MINOR) {
    out.error = fmt::format("NCCL {} at {} is not usable: the device API kernels were compiled "
                            "against the {} headers and need a {}.{}.x library (the device "
                            "structures change between minor versions; the device API appeared "
                            "in 2.28){}", a.version ? a.version_str() : std::string("(no version)"),
                            a.path, MOE_EP_NCCL_COMPILED_VERSION, NCCL_MAJOR, NCCL_MINOR,
                            missing.empty() ? "" : "; missing symbols: " + missing);
    return out;
  }
  if (!missing.empty())
    out.error = fmt::format("NCCL {} at {} lacks {}", a.version_str(), a.path, missing);
  return out;
}

const Loaded& loaded() {
  static const Loaded l = load();  // the library stays open for the life of the process
  return l;
}

}  // namespace

std::string NcclApi::version_str() const {
  return fmt::format("{}.{}.{}", version / 10000, version % 10000 / 100, version % 100);
}

std::string NcclApi::error_str(ncclResult_t result, ncclComm_t comm) const {
  std::string s = GetErrorString ? GetErrorString(result) : fmt::format("ncclResult {}", static_cast<int>(result));
  const char* last = GetLastError ? GetLastError(comm) : nullptr;
  if (last && *last) s += fmt::format(" ({})", last);
  return s;
}

const NcclApi& nccl_api() {
  const Loaded& l = loaded();
  MOE_EP_CHECK_CODE(l.error.empty(), ErrorCode::kUnsupported, "{}", l.error);
  return l.api;
}

}  // namespace moe_ep::cuda::nccl

namespace moe_ep::cuda::nccl {

std::string nccl_status() {
  try {
    const auto& a = cuda::nccl::nccl_api();
    return fmt::format("nccl {} ({}), headers {}", a.version_str(), a.path, MOE_EP_NCCL_COMPILED_VERSION);
  } catch (const Error& e) {
    return fmt::format("unusable: {}", e.message());
  }
}

}  // namespace moe_ep::cuda::nccl
