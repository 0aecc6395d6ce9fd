#include "cli/plot_svg.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/cli_common.h"
#include "core/check.h"
#include "core/host_memory.h"

namespace moe_ep::cli {
namespace {

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// One panel: x = log2(T + 1) over [0, x_max], y over [y_lo, y_hi] (log10 when log_y).
struct Panel {
  double left, top, width, height;
  double x_max, y_lo, y_hi;
  bool log_y;
  double px(double tokens) const { return left + width * std::log2(tokens + 1.0) / x_max; }
  double py(double v) const {
    const double t = log_y ? (std::log10(v) - y_lo) / (y_hi - y_lo) : (v - y_lo) / (y_hi - y_lo);
    return top + height * (1.0 - std::clamp(t, 0.0, 1.0));
  }
};

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') cur += '"', ++i;
      else if (c == '"') quoted = false;
      else cur += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

void axes(std::ostream& s, const Panel& p, const std::string& y_title, const std::vector<double>& ticks,
          const std::vector<double>& t_ticks) {
  s << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>)", p.left, p.top,
                   p.width, p.height)
    << "\n";
  for (double v : ticks) {
    const double y = p.py(v);
    s << fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#ddd"/>)", p.left, y, p.left + p.width, y)
      << fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)", p.left - 4, y + 4,
                     v >= 1 || v == 0 ? fmt::format("{:g}", v) : fmt::format("{:.0f}%", v * 100))
      << "\n";
  }
  for (double t : t_ticks) {
    const double x = p.px(t);
    s << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#eee"/>)", x, p.top, x, p.top + p.height)
      << fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{:g}</text>)", x,
                     p.top + p.height + 14, t)
      << "\n";
  }
  s << fmt::format(R"svg(<text x="{}" y="{}" font-size="12" transform="rotate(-90 {} {})" text-anchor="middle">{}</text>)svg",
                   p.left - 48, p.top + p.height / 2, p.left - 48, p.top + p.height / 2, y_title)
    << "\n";
}

void line(std::ostream& s, const Panel& p, const std::vector<std::pair<double, double>>& pts, const char* color,
          bool dashed) {
  if (pts.empty()) return;
  std::string d;
  for (const auto& [x, y] : pts) d += fmt::format("{}{:.1f},{:.1f} ", d.empty() ? "M" : "L", p.px(x), p.py(y));
  s << fmt::format(R"(<path d="{}" fill="none" stroke="{}" stroke-width="2"{}/>)", d, color,
                   dashed ? R"( stroke-dasharray="6,4")" : "")
    << "\n";
  for (const auto& [x, y] : pts)
    s << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)", p.px(x), p.py(y), color) << "\n";
}

constexpr int64_t kMaxPlotCsvBytes = int64_t{64} << 20;

double csv_number(const std::string& text, const std::string& path, const char* column) {
  double v = 0;
  MOE_EP_CHECK(whole_number(text, v) && std::isfinite(v),
               "--plot-with '{}': column '{}' holds '{}'; expected a finite number", path, column, text);
  return v;
}

}  // namespace

std::vector<PlotSeries> read_plot_csv(const std::string& path) {
  // The file is read whole into memory: a regular file of bounded size (a device such as
  // /dev/zero never ends), checked against the host budget before reading.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  MOE_EP_CHECK(!ec && std::filesystem::is_regular_file(status), "--plot-with '{}' is {}; expected a "
               "CSV file", path, ec ? ec.message() : std::string("not a regular file"));
  const auto size = std::filesystem::file_size(path, ec);
  MOE_EP_CHECK(!ec && size <= static_cast<uintmax_t>(kMaxPlotCsvBytes),
               "--plot-with '{}' is {} bytes; expected a CSV file of at most {} bytes", path,
               ec ? 0 : size, kMaxPlotCsvBytes);
  // Parsed rows cost about 4x the text (strings of each field, then the points).
  detail::require_host_bytes(static_cast<int64_t>(size) * 4,
                             fmt::format("reading --plot-with '{}'", path),
                             fmt::format("the size of '{}' ({} bytes)", path, size));
  std::ifstream f(path);
  MOE_EP_CHECK(f.good(), "--plot-with '{}' cannot be opened", path);
  std::string header_line;
  MOE_EP_CHECK(static_cast<bool>(std::getline(f, header_line)), "--plot-with '{}' is empty", path);
  const std::vector<std::string> header = split_csv_line(header_line);
  auto column = [&](const char* name) {
    const auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  };
  const int tokens = column("tokens"), time = column("time_us");
  MOE_EP_CHECK(tokens >= 0 && time >= 0, "--plot-with '{}': expected columns 'tokens' and 'time_us' in '{}'",
               path, header_line);
  int label = column("peer");
  if (label < 0) label = column("variant");
  if (label < 0) label = column("implementation");
  std::vector<PlotSeries> out;
  std::string row;
  while (std::getline(f, row)) {
    if (row.empty()) continue;
    const std::vector<std::string> v = split_csv_line(row);
    if (static_cast<int>(v.size()) <= std::max({tokens, time, label})) continue;
    const std::string name = label >= 0 ? v[label] : path;
    auto it = std::find_if(out.begin(), out.end(), [&](const PlotSeries& s) { return s.label == name; });
    if (it == out.end()) it = out.insert(out.end(), PlotSeries{name, {}});
    it->points.push_back({csv_number(v[tokens], path, "tokens"), csv_number(v[time], path, "time_us")});
  }
  for (PlotSeries& s : out)
    std::sort(s.points.begin(), s.points.end(), [](const PlotPoint& a, const PlotPoint& b) { return a.tokens < b.tokens; });
  return out;
}

void write_plot_svg(const std::string& path, const std::string& title, const std::vector<PlotSeries>& series,
                    const std::map<double, double>& floor_us) {
  double t_max = 1, lo = 1e300, hi = 0;
  for (const PlotSeries& s : series)
    for (const PlotPoint& p : s.points) {
      t_max = std::max(t_max, p.tokens);
      if (p.time_us > 0) lo = std::min(lo, p.time_us), hi = std::max(hi, p.time_us);
    }
  for (const auto& [t, f] : floor_us) lo = std::min(lo, f), hi = std::max(hi, f);
  if (hi <= 0) lo = 1, hi = 10;
  const double x_max = std::log2(t_max + 1.0);
  const Panel time{80, 50, 560, 300, x_max, std::floor(std::log10(lo)), std::ceil(std::log10(hi * 1.01)), true};
  const Panel frac{80, 420, 560, 220, x_max, 0.0, 1.0, false};
  std::vector<double> t_ticks;
  for (double t = 1; t <= t_max; t *= 4) t_ticks.push_back(t);
  std::vector<double> time_ticks;
  for (double e = time.y_lo; e <= time.y_hi; e += 1) time_ticks.push_back(std::pow(10.0, e));

  std::ostringstream s;
  s << R"(<svg xmlns="http://www.w3.org/2000/svg" width="900" height="690" font-family="sans-serif">)" << "\n"
    << R"(<rect width="100%" height="100%" fill="white"/>)" << "\n"
    << fmt::format(R"(<text x="360" y="24" font-size="15" text-anchor="middle">{}</text>)", xml_escape(title)) << "\n";
  axes(s, time, "time per forward (us, log)", time_ticks, t_ticks);
  axes(s, frac, "fraction of the floor", {0, 0.25, 0.5, 0.75, 1.0}, t_ticks);
  s << R"svg(<text x="360" y="680" font-size="12" text-anchor="middle">tokens T (log)</text>)svg" << "\n";
  std::vector<std::pair<double, double>> floor_pts(floor_us.begin(), floor_us.end());
  line(s, time, floor_pts, "#000", true);
  s << R"(<text x="660" y="60" font-size="12">- - roofline floor</text>)" << "\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    std::vector<std::pair<double, double>> t_pts, f_pts;
    for (const PlotPoint& p : series[i].points) {
      if (p.time_us <= 0) continue;
      t_pts.emplace_back(p.tokens, p.time_us);
      const auto f = floor_us.find(p.tokens);
      if (f != floor_us.end()) f_pts.emplace_back(p.tokens, f->second / p.time_us);
    }
    line(s, time, t_pts, color, false);
    line(s, frac, f_pts, color, false);
    s << fmt::format(R"(<rect x="660" y="{}" width="14" height="4" fill="{}"/><text x="680" y="{}" font-size="12">{}</text>)",
                     74 + 18 * i, color, 80 + 18 * i, xml_escape(series[i].label))
      << "\n";
  }
  s << "</svg>\n";
  std::ofstream out(path);
  MOE_EP_CHECK(out.good(), "--plot '{}' cannot be opened for writing", path);
  out << s.str();
  out.close();  // flushes: a full disk shows here, not at open
  MOE_EP_CHECK_CODE(!out.fail(), ErrorCode::kRuntime, "--plot '{}': writing failed ({})", path,
                    std::strerror(errno));
}

}  // namespace moe_ep::cli
