// Shared by the subcommands: exit codes, error reporting, device resolution, JSON helpers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "moe_ep/kernel_config.h"
#include "moe_ep/tensor.h"

namespace moe_ep::cli {

// Process exit codes of the tool (documented in README.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the check failed, or a runtime / device error
inline constexpr int kExitUsage = 2;   // bad flag or value, or a request this build/machine cannot do

using Json = nlohmann::ordered_json;

// Runs a subcommand body, turning moe_ep::Error and other exceptions into one message on stderr
// ("moe_ep <command>: error: ...") and an exit code: kInvalidArgument and kUnsupported give
// kExitUsage, everything else kExitFailed.
int run_guarded(const std::string& command, const std::function<int()>& body);

struct ResolvedDevice {
  Device device;
  int compute_capability = 0;  // 0 for the CPU
  std::string name;            // human-readable device name
};

// `spec` is what the user typed for --device: auto, cpu, cuda or cuda:N. auto picks cuda:0 when
// this build drives CUDA and a device is present, else the CPU. Throws kInvalidArgument naming
// --device for malformed values, kUnsupported when CUDA is asked for but unavailable.
ResolvedDevice resolve_device(const std::string& spec);

// {"entries": {key: value, ...}, "plan": {"T=a..b": what runs, ...}} of a layer's selected config.
Json config_json(const SelectedConfig& config);
// Every line of `text` prefixed with `prefix`.
std::string indent(const std::string& text, const std::string& prefix);

// The status line of a registered transport ("nccl 2.28.9 (...)"), or why it is not in this build.
std::string transport_status(const std::string& name);

// Flag validators with short messages ("'abc' is not an integer; expected an integer >= 1").
CLI::Validator integer_at_least(int64_t min);
CLI::Validator number_at_least(double min, bool strictly_greater = false);
CLI::Validator number_in_range(double min, double max);

double median(std::vector<double> values);
// Non-finite doubles become JSON null (JSON has no NaN / Inf).
Json json_number(double v);

}  // namespace moe_ep::cli
