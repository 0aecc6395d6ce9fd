// NCCL's host API, opened at run time (dlopen of libnccl.so.2): binaries start where the library
// is missing or too old, and say so when an NCCL runtime is asked for. Search order:
// $MOE_EP_NCCL_LIBRARY (a path), then libnccl.so.2 through the loader (LD_LIBRARY_PATH, or the
// copy a framework such as PyTorch already loaded), then the CUDA toolkit's copy found at
// configure time.
//
// The device kernels are compiled against the toolkit's nccl_device.h; its structures
// (ncclDevComm, ncclWindow) are only stable within one minor version, so the library must be
// 2.28.x like the headers.
#pragma once

#include <string>

#include <nccl.h>
#include <nccl_device.h>

namespace moe_ep::cuda::nccl {

struct NcclApi {
  std::string path;   // the library that was opened
  int version = 0;    // ncclGetVersion: major*10000 + minor*100 + patch

  decltype(&::ncclGetVersion) GetVersion = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGetLastError) GetLastError = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclCommFinalize) CommFinalize = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommCount) CommCount = nullptr;
  decltype(&::ncclCommUserRank) CommUserRank = nullptr;
  decltype(&::ncclCommCuDevice) CommCuDevice = nullptr;
  decltype(&::ncclMemAlloc) MemAlloc = nullptr;
  decltype(&::ncclMemFree) MemFree = nullptr;
  decltype(&::ncclCommWindowRegister) CommWindowRegister = nullptr;
  decltype(&::ncclCommWindowDeregister) CommWindowDeregister = nullptr;
  decltype(&::ncclDevCommCreate) DevCommCreate = nullptr;
  decltype(&::ncclDevCommDestroy) DevCommDestroy = nullptr;
  decltype(&::ncclAllGather) AllGather = nullptr;

  std::string version_str() const;  // "2.28.9"
  // "<name> (<last error of comm>)"
  std::string error_str(ncclResult_t result, ncclComm_t comm = nullptr) const;
};

// Opened once per process; throws kUnsupported naming what was tried and found (no library,
// a missing symbol, a version other than 2.28.x).
const NcclApi& nccl_api();

// "nccl <version> (<library path>), headers <version>", or why NCCL cannot be used here (for
// `moe_ep info` and messages). Never throws.
std::string nccl_status();

}  // namespace moe_ep::cuda::nccl
