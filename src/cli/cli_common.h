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

// Upper bound of --iters, --warmup and --load-repeats: each run keeps one time per iteration,
// and a larger count is a typo, not a measurement.
inline constexpr int64_t kMaxIterations = 1000000;

// Whether all of `text` is one number that std::stoll / std::stod reads (then in `v`).
bool whole_integer(const std::string& text, long long& v);
bool whole_number(const std::string& text, double& v);

// Flag validators with short messages ("'abc' is not an integer; expected an integer >= 1").
CLI::Validator integer_at_least(int64_t min);
CLI::Validator integer_in_range(int64_t min, int64_t max);
// Refuses an empty value ("--kernel ''"), which would otherwise read as "not given".
CLI::Validator non_empty();
// A decimal number (no hex, inf or nan forms) or one of `words`.
CLI::Validator decimal_number_or(std::vector<std::string> words);
// "--on" and "--off" as two flags that exclude each other (typing both is a mistake); `value`
// keeps its default when neither is given.
void add_on_off_flag(CLI::App& cmd, const std::string& on, const std::string& off, bool& value,
                     const std::string& description);
// A comma-separated list with no empty element ("1,,2" is refused): its elements.
std::vector<std::string> split_list(const std::string& text, const std::string& flag);
// The same list as integers >= min.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag, int64_t min);
CLI::Validator number_at_least(double min, bool strictly_greater = false);
CLI::Validator number_in_range(double min, double max);

double median(std::vector<double> values);
// Non-finite doubles become JSON null (JSON has no NaN / Inf).
Json json_number(double v);

}  // namespace moe_ep::cli
