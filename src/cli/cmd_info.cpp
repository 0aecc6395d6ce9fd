// `moe_ep info`: build features, the backend table, presets and devices.
#include <fmt/format.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/device_driver.h"
#include "cli/workspace_report.h"
#include "core/device_transport.h"
#include "moe_ep/backend.h"
#include "testing/presets.h"

namespace moe_ep::cli {
namespace {

#ifdef MOE_EP_WITH_CUDA
constexpr bool kCudaCompiled = true;
#else
constexpr bool kCudaCompiled = false;
#endif
#ifdef MOE_EP_CLI_HAS_CUDA_DRIVER
constexpr bool kCudaDriver = true;
#else
constexpr bool kCudaDriver = false;
#endif
#ifdef MOE_EP_WITH_NCCL
constexpr bool kNcclCompiled = true;
#else
constexpr bool kNcclCompiled = false;
#endif

Json runtime_parts_json(uint32_t parts) {
  Json j = Json::array();
  if (parts & kRuntimeSymmetricWorkspace) j.push_back("symmetric-workspace");
  if (parts & kRuntimePeerTransport) j.push_back("peer-transport");
  if (parts & kRuntimeDeviceErrorFlag) j.push_back("device-error-flag");
  return j;
}

std::string cc_str(int cc) { return fmt::format("{}.{}", cc / 10, cc % 10); }

Json info_json() {
  Json j;
  j["version"] = MOE_EP_VERSION;
  j["build"] = {{"cuda_compiled", kCudaCompiled},
                {"cuda_cli_driver", kCudaDriver},
                {"nccl_compiled", kNcclCompiled},
                {"nccl", detail::nccl_status()}};
  Json backends = Json::array();
  for (const FamilyProperties& f : backend_table()) {
    Json b;
    b["name"] = f.name;
    b["description"] = f.description;
    Json impls = Json::array();
    for (const Implementation& impl : f.implementations) {
      Json i;
      i["name"] = impl.name;
      i["device"] = impl.device == DeviceType::kCPU ? "cpu" : "cuda";
      if (impl.device == DeviceType::kCUDA) {
        i["min_compute_capability"] = impl.min_compute_capability;
        i["max_compute_capability"] = impl.max_compute_capability;
      }
      i["compiled"] = impl.compiled;
      impls.push_back(i);
    }
    b["implementations"] = impls;
    Json formats = Json::array();
    for (WeightFormat w : f.weight_formats) formats.push_back(weight_format_name(w));
    b["weight_formats"] = formats;
    b["hidden_align"] = f.hidden_align;
    b["intermediate_align"] = f.intermediate_align;
    b["runtime_parts"] = runtime_parts_json(f.runtime_parts);
    backends.push_back(b);
  }
  j["backends"] = backends;
  Json presets = Json::array();
  for (const testing::Preset& p : testing::presets())
    presets.push_back({{"name", p.name}, {"H", p.hidden_size}, {"I", p.intermediate_size},
                       {"E", p.num_experts}, {"K", p.top_k}, {"activation_clamp", p.activation_clamp},
                       {"layers", p.num_layers}, {"routed_scaling_factor", p.routed_scaling_factor},
                       {"max_tokens_per_rank", p.max_tokens_per_rank}});
  j["presets"] = presets;
  const DeviceDescription cpu = describe_cpu();
  std::string status;
  const auto gpus = list_cuda_devices(&status);
  Json devices = Json::array();
  devices.push_back({{"device", "cpu"}, {"name", cpu.name}, {"threads", cpu.num_units},
                     {"memory_bytes", cpu.memory_bytes}});
  for (const DeviceDescription& g : gpus)
    devices.push_back({{"device", g.device.str()}, {"name", g.name},
                       {"compute_capability", g.compute_capability},
                       {"multiprocessors", g.num_units}, {"memory_bytes", g.memory_bytes}});
  j["devices"] = devices;
  j["cuda_status"] = gpus.empty() ? status : fmt::format("{} CUDA device(s)", gpus.size());
  j["workspace"] = preset_workspaces_json(8);
  return j;
}

void print_info(const Json& j) {
  fmt::print("moe_ep {}\n", j["version"].get<std::string>());
  fmt::print("build: cuda {}, cuda cli driver {}, nccl {}\n",
             kCudaCompiled ? "compiled" : "not compiled", kCudaDriver ? "yes" : "no",
             kNcclCompiled ? "compiled" : "not compiled");
  fmt::print("nccl: {}\n", j["build"]["nccl"].get<std::string>());
  fmt::print("\nbackends:\n");
  for (const FamilyProperties& f : backend_table()) {
    fmt::print("  {:<6} {}\n", f.name, f.description);
    std::string impls, formats;
    for (const Implementation& impl : f.implementations) {
      const std::string where = impl.device == DeviceType::kCPU
                                    ? "any CPU"
                                    : fmt::format("sm {}..{}", cc_str(impl.min_compute_capability),
                                                  cc_str(impl.max_compute_capability));
      impls += fmt::format("{}{} ({}, {})", impls.empty() ? "" : ", ", impl.name, where,
                           impl.compiled ? "compiled" : "not compiled");
    }
    for (WeightFormat w : f.weight_formats)
      formats += fmt::format("{}{}", formats.empty() ? "" : ", ", weight_format_name(w));
    std::string parts;
    for (const auto& p : runtime_parts_json(f.runtime_parts))
      parts += fmt::format("{}{}", parts.empty() ? "" : ", ", p.get<std::string>());
    fmt::print("         implementations: {}\n", impls);
    fmt::print("         weights: {}; H % {} == 0, I % {} == 0\n", formats, f.hidden_align,
               f.intermediate_align);
    fmt::print("         runtime parts: {}\n", parts);
  }
  fmt::print("\npresets:\n");
  for (const testing::Preset& p : testing::presets())
    fmt::print("  {:<18} H={:<5} I={:<5} E={:<4} K={} clamp={} layers={} routed_scale={} "
               "max_tokens_per_rank={}\n",
               p.name, p.hidden_size, p.intermediate_size, p.num_experts, p.top_k,
               p.activation_clamp, p.num_layers, p.routed_scaling_factor, p.max_tokens_per_rank);
  fmt::print("\ndevices:\n");
  for (const auto& d : j["devices"]) {
    if (d["device"] == "cpu")
      fmt::print("  cpu     {} ({} threads, {:.1f} GiB)\n", d["name"].get<std::string>(),
                 d["threads"].get<int>(), d["memory_bytes"].get<double>() / (1 << 30));
    else
      fmt::print("  {:<7} {} (compute capability {}, {} SMs, {:.1f} GiB)\n",
                 d["device"].get<std::string>(), d["name"].get<std::string>(),
                 cc_str(d["compute_capability"].get<int>()), d["multiprocessors"].get<int>(),
                 d["memory_bytes"].get<double>() / (1 << 30));
  }
  fmt::print("  {}\n", j["cuda_status"].get<std::string>());
  print_preset_workspaces(8);
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "Build features, backends and their properties, "
                                             "presets, devices with compute capability.");
  cmd->add_flag("--json", *json, "print exactly one JSON object on stdout");
  return {cmd, [json] {
            return run_guarded("info", [json] {
              const Json j = info_json();
              if (*json)
                fmt::print("{}\n", j.dump());
              else
                print_info(j);
              return kExitOk;
            });
          }};
}

}  // namespace moe_ep::cli
