#include "cli/cli_common.h"

#include <algorithm>
#include <cctype>
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
    // The budget checks (cli/host_budget.h, the checkpoint loader) refuse known sizes first;
    // this is an allocation they did not foresee, so name what drives the sizes.
    fmt::print(stderr, "moe_ep {}: error: out of host memory (an allocation failed; the sizes are "
               "driven by --tokens, --ranks, --layers, --eplb-redundant and --preset, or by the "
               "checkpoint's config.json: n_routed_experts, hidden_size, moe_intermediate_size)\n",
               command);
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

bool whole_integer(const std::string& text, long long& v) {
  size_t used = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used != 0 && used == text.size();
}

bool whole_number(const std::string& text, double& v) {
  size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used != 0 && used == text.size();
}

CLI::Validator integer_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        long long v = 0;
        if (!whole_integer(value, v))
          return fmt::format("'{}' is not an integer; expected an integer >= {}", value, min);
        if (v < min) return fmt::format("{} is too small; expected an integer >= {}", v, min);
        return "";
      },
      fmt::format("INT >= {}", min));
}

CLI::Validator integer_in_range(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& value) -> std::string {
        long long v = 0;
        if (!whole_integer(value, v) || v < min || v > max)
          return fmt::format("'{}' is not an integer in [{}, {}]", value, min, max);
        return "";
      },
      fmt::format("INT in [{}, {}]", min, max));
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        return value.empty() ? std::string("the value is empty; expected a value") : std::string();
      },
      "");
}

CLI::Validator decimal_number_or(std::vector<std::string> words) {
  return CLI::Validator(
      [words](std::string& value) -> std::string {
        if (std::find(words.begin(), words.end(), value) != words.end()) return "";
        // [+-] digits [. digits] [e [+-] digits], at least one digit before the exponent.
        size_t i = 0, digits = 0;
        if (i < value.size() && (value[i] == '+' || value[i] == '-')) ++i;
        while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i, ++digits;
        if (i < value.size() && value[i] == '.') {
          ++i;
          while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i, ++digits;
        }
        bool ok = digits > 0;
        if (ok && i < value.size() && (value[i] == 'e' || value[i] == 'E')) {
          ++i;
          if (i < value.size() && (value[i] == '+' || value[i] == '-')) ++i;
          size_t exp_digits = 0;
          while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i, ++exp_digits;
          ok = exp_digits > 0;
        }
        if (ok && i == value.size()) return "";
        std::string allowed;
        for (const std::string& w : words) allowed += " or " + w;
        return fmt::format("'{}' is not a decimal number; expected a decimal number{}", value, allowed);
      },
      "NUMBER");
}

void add_on_off_flag(CLI::App& cmd, const std::string& on, const std::string& off, bool& value,
                     const std::string& description) {
  CLI::Option* on_flag = cmd.add_flag_callback(on, [&value] { value = true; }, description);
  cmd.add_flag_callback(off, [&value] { value = false; }, fmt::format("the opposite of {}", on))
      ->excludes(on_flag);
}

std::vector<std::string> split_list(const std::string& text, const std::string& flag) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(',', begin);
    out.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    MOE_EP_CHECK(!out.back().empty(), "{} '{}' has an empty element; expected a comma-separated "
                 "list such as a,b,c", flag, text);
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag, int64_t min) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text, flag)) {
    long long v = 0;
    MOE_EP_CHECK(whole_integer(item, v) && v >= min, "{} '{}': element '{}' is not an "
                 "integer >= {}", flag, text, item, min);
    out.push_back(v);
  }
  return out;
}

CLI::Validator number_at_least(double min, bool strictly_greater) {
  return CLI::Validator(
      [min, strictly_greater](std::string& value) -> std::string {
        const char* op = strictly_greater ? ">" : ">=";
        double v = 0;
        if (!whole_number(value, v) || !std::isfinite(v))
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
        double v = 0;
        if (!whole_number(value, v) || !(v >= min && v <= max))
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
