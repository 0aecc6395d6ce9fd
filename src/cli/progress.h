// A single-line progress bar on stderr, drawn only when stderr is a terminal (never on stdout,
// so `--json` output stays one clean object).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace moe_ep::cli {

class ProgressBar {
 public:
  // enabled = false draws nothing; by default the bar is on when stderr is a TTY.
  ProgressBar(std::string label, int64_t total, bool enabled = stderr_is_terminal());
  ~ProgressBar();  // finishes the line if update() drew anything
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(int64_t done);  // redraws at most ~10 times a second, and always at done == total
  void finish();

  static bool stderr_is_terminal();

 private:
  void draw(int64_t done);

  std::string label_;
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace moe_ep::cli
