// The report: one self-contained HTML page (inline SVG and CSS, a few lines of inline
// script, nothing fetched) that shows why a run is fast or slow. `train --report`,
// `plan --report`, `simulate --report` and `pipetrain report` each fill in what they know;
// empty parts are left out.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "pipetrain/trace/timeline.h"

namespace pipetrain::report {

struct Fact {
  std::string label, value;
};

struct Table {
  std::string caption;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  int highlighted_row = -1;  // e.g. the planner's choice
};

enum class Unit { kFraction, kBytes, kSeconds, kPlain };

// Grouped horizontal bars: for each category (a rank) one bar per series.
struct BarChart {
  std::string id, title;
  Unit unit = Unit::kFraction;
  std::vector<std::string> categories;
  struct Series {
    std::string name;
    std::vector<double> values;  // one per category; NaN = not known
  };
  std::vector<Series> series;
};

struct LineChart {
  std::string id, title, x_label, y_label;
  double y_most = INFINITY;  // the largest value the quantity can take (accuracy: 1); the axis stops there
  struct Series {
    std::string name;
    std::vector<std::pair<double, double>> points;
    bool markers = false;  // a dot per point (few points, e.g. one per epoch)
  };
  std::vector<Series> series;
};

struct Page {
  std::string title;
  std::vector<Fact> facts;
  std::vector<std::string> notes;            // one sentence each
  std::vector<Table> tables;                 // the plan's stages, the planner's ranking
  std::vector<trace::Timeline> timelines;    // predicted above measured
  std::vector<BarChart> bars;
  std::vector<LineChart> lines;
};

std::string renderHtml(const Page& page);
// Writes the page to `path` (through a temporary file renamed over it); an Error names
// the path when it cannot.
void writeHtml(const Page& page, const std::string& path);

}  // namespace pipetrain::report
