// `moe_ep info`: build features, the recipes and the registered backends and transports,
// presets and devices.
#include <fmt/format.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/device_driver.h"
#include "cli/workspace_report.h"
#include "moe_ep/backend.h"
#include "moe_ep/recipe.h"
#include "testing/presets.h"

namespace moe_ep::cli {
namespace {

#ifdef MOE_EP_CLI_HAS_CUDA_DRIVER
constexpr bool kCudaDriver = true;
#else
constexpr bool kCudaDriver = false;
#endif

std::string cc_str(int cc) { return fmt::format("{}.{}", cc / 10, cc % 10); }

bool has_backend(DeviceType device) {
  for (const BackendInfo& b : registered_backends())
    if (b.device == device) return true;
  return false;
}

bool has_transport(const std::string& name) {
  for (const TransportInfo& t : registered_transports())
    if (t.name == name) return true;
  return false;
}

std::string join_formats(std::span<const WeightFormat> formats) {
  std::string s;
  for (WeightFormat w : formats) s += fmt::format("{}{}", s.empty() ? "" : ", ", weight_format_name(w));
  return s;
}

Json info_json() {
  Json j;
  j["version"] = MOE_EP_VERSION;
  j["build"] = {{"cuda_compiled", has_backend(DeviceType::kCUDA)},
                {"cuda_cli_driver", kCudaDriver},
                {"nccl_compiled", has_transport("nccl")},
                {"nccl", transport_status("nccl")}};
  Json recipes = Json::array();
  for (const RecipeTraits& r : recipe_table()) {
    Json formats = Json::array();
    for (WeightFormat w : r.weight_formats) formats.push_back(weight_format_name(w));
    Json impls = Json::array();
    for (const BackendInfo& b : registered_backends())
      for (Recipe x : b.recipes)
        if (x == r.recipe) impls.push_back(b.name);
    recipes.push_back({{"name", r.name}, {"description", r.description}, {"block", r.block},
                       {"weight_formats", formats}, {"hidden_align", r.hidden_align},
                       {"intermediate_align", r.intermediate_align}, {"implementations", impls}});
  }
  j["recipes"] = recipes;
  Json backends = Json::array();
  for (const BackendInfo& b : registered_backends()) {
    Json e{{"name", b.name}, {"description", b.description},
           {"device", b.device == DeviceType::kCPU ? "cpu" : "cuda"}};
    if (b.device == DeviceType::kCUDA) {
      e["min_compute_capability"] = b.min_compute_capability;
      e["max_compute_capability"] = b.max_compute_capability;
    }
    Json rs = Json::array();
    for (Recipe r : b.recipes) rs.push_back(recipe_name(r));
    e["recipes"] = rs;
    backends.push_back(e);
  }
  j["backends"] = backends;
  Json transports = Json::array();
  for (const TransportInfo& t : registered_transports())
    transports.push_back({{"name", t.name}, {"status", t.status}});
  j["transports"] = transports;
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
             j["build"]["cuda_compiled"].get<bool>() ? "compiled" : "not compiled",
             kCudaDriver ? "yes" : "no", j["build"]["nccl_compiled"].get<bool>() ? "compiled" : "not compiled");
  fmt::print("nccl: {}\n", j["build"]["nccl"].get<std::string>());
  fmt::print("\nrecipes (--backend):\n");
  for (const RecipeTraits& r : recipe_table()) {
    std::string impls;
    for (const auto& i : j["recipes"][static_cast<int>(r.recipe)]["implementations"])
      impls += fmt::format("{}{}", impls.empty() ? "" : ", ", i.get<std::string>());
    fmt::print("  {:<6} {}\n", r.name, r.description);
    fmt::print("         weights: {}; H % {} == 0, I % {} == 0; implementations: {}\n",
               join_formats(r.weight_formats), r.hidden_align, r.intermediate_align, impls);
  }
  fmt::print("\nbackends (registered in this build):\n");
  for (const BackendInfo& b : registered_backends())
    fmt::print("  {:<10} {} ({})\n", b.name, b.description,
               b.device == DeviceType::kCPU ? std::string("any CPU")
                                            : fmt::format("compute capability {}..{}", cc_str(b.min_compute_capability),
                                                          cc_str(b.max_compute_capability)));
  fmt::print("\ntransports (Bootstrap.comm):\n");
  for (const TransportInfo& t : registered_transports()) fmt::print("  {:<15} {}\n", t.name, t.status);
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
