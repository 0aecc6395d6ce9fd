#include "cli/cli_common.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>

#include <fmt/format.h>

#include "cli/device_driver.h"
#include "core/check.h"
#include "moe_ep/backend.h"
#include "moe_ep/error.h"

namespace moe_ep::cli {

int run_guarded(const std::string& command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    fmt::print(stderr, "moe_ep {}: error: {}\n", command, e.message());
    const bool usage = e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kUnsupported;
    if (!usage) fmt::print(stderr, "  ({} at {}:{})\n", error_code_name(e.code()), e.file(), e.line());
    return usage ? kExitUsage : kExitFailed;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "moe_ep {}: error: out of host memory\n", command);
    return kExitFailed;
  } catch (const std::exception& e) {
    fmt::print(stderr, "moe_ep {}: error: {}\n", command, e.what());
    return kExitFailed;
  }
}

ResolvedDevice resolve_device(const std::string& spec) {
  ResolvedDevice r;
  if (spec == "cpu") {
    r.device = Device::cpu();
    r.name = describe_cpu().name;
    return r;
  }
  int index = 0;
  const bool is_auto = spec == "auto";
  if (!is_auto) {
    const bool cuda_prefix = spec.rfind("cuda", 0) == 0;
    bool ok = cuda_prefix && (spec.size() == 4 || spec[4] == ':');
    if (ok && spec.size() > 4) {
      const std::string digits = spec.substr(5);
      ok = !digits.empty() && digits.size() <= 4 &&
           std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (ok) index = std::stoi(digits);
    }
    MOE_EP_CHECK(ok, "--device '{}' is not a device; allowed: auto, cpu, cuda, cuda:N", spec);
  }
  std::string status;
  const std::vector<DeviceDescription> gpus = list_cuda_devices(&status);
  if (is_auto) {
    if (gpus.empty()) {
      r.device = Device::cpu();
      r.name = describe_cpu().name;
      return r;
    }
  } else {
    MOE_EP_CHECK_CODE(!gpus.empty(), ErrorCode::kUnsupported,
                      "--device {}: no CUDA device can be used ({}); use --device cpu", spec, status);
    MOE_EP_CHECK_CODE(index < static_cast<int>(gpus.size()), ErrorCode::kUnsupported,
                      "--device {}: this machine has {} CUDA device(s), cuda:0..cuda:{}", spec,
                      gpus.size(), gpus.size() - 1);
  }
  r.device = gpus[index].device;
  r.compute_capability = gpus[index].compute_capability;
  r.name = gpus[index].name;
  return r;
}

Json config_json(const SelectedConfig& config) {
  Json entries = Json::object(), plan = Json::object();
  for (const ConfigEntry& e : config.entries) entries[e.key] = e.value;
  for (const ConfigEntry& e : config.plan) plan[e.key] = e.value;
  return Json{{"entries", entries}, {"plan", plan}};
}

std::string indent(const std::string& text, const std::string& prefix) {
  std::string out;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    const size_t stop = end == std::string::npos ? text.size() : end;
    out += prefix + text.substr(begin, stop - begin) + "\n";
    begin = stop + 1;
  }
  return out;
}

std::string transport_status(const std::string& name) {
  for (const TransportInfo& t : registered_transports())
    if (t.name == name) return t.status;
  return fmt::format("not in this build (no {} transport registered)", name);
}

CLI::Validator integer_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != value.size())
          return fmt::format("'{}' is not an integer; expected an integer >= {}", value, min);
        if (v < min) return fmt::format("{} is too small; expected an integer >= {}", v, min);
        return "";
      },
      fmt::format("INT >= {}", min));
}

CLI::Validator number_at_least(double min, bool strictly_greater) {
  return CLI::Validator(
      [min, strictly_greater](std::string& value) -> std::string {
        const char* op = strictly_greater ? ">" : ">=";
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != value.size() || !std::isfinite(v))
          return fmt::format("'{}' is not a number; expected a number {} {}", value, op, min);
        if (strictly_greater ? v <= min : v < min)
          return fmt::format("{} is too small; expected a number {} {}", v, op, min);
        return "";
      },
      fmt::format("NUMBER {} {}", strictly_greater ? ">" : ">=", min));
}

CLI::Validator number_in_range(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& value) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != value.size() || !(v >= min && v <= max))
          return fmt::format("'{}' is not a number in [{}, {}]", value, min, max);
        return "";
      },
      fmt::format("NUMBER in [{}, {}]", min, max));
}

double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Json json_number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace moe_ep::cli
