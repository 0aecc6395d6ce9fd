#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace moe_ep::cli {

namespace {
constexpr int kBarWidth = 30;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
}  // namespace

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 1)), enabled_(enabled),
      start_(std::chrono::steady_clock::now()), last_draw_(start_ - kRedrawInterval) {}

ProgressBar::~ProgressBar() { finish(); }

bool ProgressBar::stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

void ProgressBar::update(int64_t done) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  draw(done);
}

void ProgressBar::draw(int64_t done) {
  done = std::clamp<int64_t>(done, 0, total_);
  const int filled = static_cast<int>(kBarWidth * done / total_);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  fmt::print(stderr, "\r{} [{}{}] {}/{} {:.1f}s", label_, std::string(filled, '#'),
             std::string(kBarWidth - filled, ' '), done, total_, seconds);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (drawn_) {
    fmt::print(stderr, "\n");
    std::fflush(stderr);
  }
}

}  // namespace moe_ep::cli
