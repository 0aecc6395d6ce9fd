// `moe_ep bench --plot FILE.svg`: forward time and fraction of the roofline floor against T, one
// line per series (each kernel variant of the run, and the series of --plot-with CSV files: other
// bench runs, the PyTorch peers of bench/torch_peer.py), log-scaled T. A plain SVG writer: no
// dependency, readable in any browser.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace moe_ep::cli {

struct PlotPoint {
  double tokens = 0.0, time_us = 0.0;
};

struct PlotSeries {
  std::string label;
  std::vector<PlotPoint> points;  // ascending T
};

// floor_us: the floor per T (from this run), for the fraction-of-floor panel.
void write_plot_svg(const std::string& path, const std::string& title, const std::vector<PlotSeries>& series,
                    const std::map<double, double>& floor_us);

// Series of a CSV with columns tokens and time_us, labelled by its `peer`, `variant` or
// `implementation` column (in that order). bench names a series "FILE-STEM:label" when its label
// is taken.
std::vector<PlotSeries> read_plot_csv(const std::string& path);

}  // namespace moe_ep::cli
