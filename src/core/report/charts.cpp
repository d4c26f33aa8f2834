// The report's charts as inline SVG: grouped bars per rank and lines over time. Axes
// get "nice" ticks (1, 2 or 5 times a power of ten); every mark has a <title> tooltip.
#include "charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pipetrain/util/text.h"

namespace pipetrain::report {
namespace {

using text::xmlEscape;

// One colour per series, distinguishable in print and by most colour-blind readers
// (Okabe & Ito's palette).
constexpr const char* kPalette[] = {"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

std::string fmt(double v, int digits = 3) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string number(double v) { return fmt(v, 4); }

// Ticks covering [0, max] (or [min, max]) at a round step, about `count` of them.
std::vector<double> niceTicks(double lo, double hi, int count) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, count);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * magnitude) {
      step = m * magnitude;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::floor(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
  if (ticks.back() < hi) ticks.push_back(ticks.back() + step);
  return ticks;
}

// Coloured keys from (x, y) on, a row of 16 px each, wrapped before `right`.
struct Legend {
  std::string svg;
  int rows = 1;
};
Legend legend(const std::vector<std::string>& names, double x, double y, double right) {
  Legend out;
  const double left = x;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const double w = 24 + 7.0 * static_cast<double>(names[i].size());
    if (x > left && x + w > right) x = left, y += 16, ++out.rows;
    out.svg += "<rect x=\"" + number(x) + "\" y=\"" + number(y - 9) + "\" width=\"10\" height=\"10\" fill=\"" +
               kPalette[i % kPaletteSize] + "\"/><text x=\"" + number(x + 14) + "\" y=\"" + number(y) + "\">" +
               xmlEscape(names[i]) + "</text>";
    x += w;
  }
  return out;
}

}  // namespace

std::string formatValue(double value, Unit unit) {
  if (std::isnan(value)) return "n/a";
  switch (unit) {
    case Unit::kFraction: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f%%", 100 * value);
      return buf;
    }
    case Unit::kBytes: return text::humanBytes(value);
    case Unit::kSeconds: return value < 1 ? fmt(1e3 * value, 3) + " ms" : fmt(value, 4) + " s";
    case Unit::kPlain: break;
  }
  return fmt(value, 4);
}

std::string barChartSvg(const BarChart& chart) {
  constexpr double kLabelW = 90, kPlotW = 560, kBarH = 14, kGap = 10, kRight = 90;
  std::vector<std::string> names;
  for (const auto& s : chart.series) names.push_back(s.name);
  const Legend keys = legend(names, kLabelW, 16, kLabelW + kPlotW + kRight);
  const double top = 34 + 16 * (keys.rows - 1);
  const std::size_t groups = chart.categories.size(), per = std::max<std::size_t>(1, chart.series.size());
  double max = 0;
  for (const auto& s : chart.series)
    for (double v : s.values)
      if (std::isfinite(v)) max = std::max(max, v);
  if (chart.unit == Unit::kFraction) max = std::max(max, 0.01);
  const std::vector<double> ticks = niceTicks(0, max > 0 ? max : 1, 5);
  const double top_value = ticks.back();
  const double group_h = static_cast<double>(per) * kBarH + kGap;
  const double plot_h = static_cast<double>(groups) * group_h;
  const double width = kLabelW + kPlotW + kRight, height = top + plot_h + 28;
  auto xOf = [&](double v) { return kLabelW + kPlotW * v / top_value; };

  std::string out = "<svg class=\"chart\" id=\"" + xmlEscape(chart.id) + "\" xmlns=\"http://www.w3.org/2000/svg\" "
                    "viewBox=\"0 0 " + number(width) + " " + number(height) + "\" width=\"" + number(width) + "\">";
  out += keys.svg;
  for (double t : ticks) {
    const double x = xOf(t);
    out += "<line class=\"grid\" x1=\"" + number(x) + "\" x2=\"" + number(x) + "\" y1=\"" + number(top - 4) +
           "\" y2=\"" + number(top + plot_h) + "\"/><text class=\"tick\" x=\"" + number(x) + "\" y=\"" +
           number(top + plot_h + 16) + "\" text-anchor=\"middle\">" + xmlEscape(formatValue(t, chart.unit)) +
           "</text>";
  }
  for (std::size_t g = 0; g < groups; ++g) {
    const double y0 = top + static_cast<double>(g) * group_h;
    out += "<text x=\"" + number(kLabelW - 8) + "\" y=\"" + number(y0 + static_cast<double>(per) * kBarH / 2 + 4) +
           "\" text-anchor=\"end\">" + xmlEscape(chart.categories[g]) + "</text>";
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
      const double v = g < chart.series[s].values.size() ? chart.series[s].values[g] : NAN;
      const double y = y0 + static_cast<double>(s) * kBarH;
      const double w = std::isfinite(v) ? std::max(0.0, xOf(v) - kLabelW) : 0;
      const std::string tip = chart.categories[g] + ", " + chart.series[s].name + ": " + formatValue(v, chart.unit);
      out += "<rect x=\"" + number(kLabelW) + "\" y=\"" + number(y + 1) + "\" width=\"" + number(w) +
             "\" height=\"" + number(kBarH - 2) + "\" fill=\"" + kPalette[s % kPaletteSize] + "\"><title>" +
             xmlEscape(tip) + "</title></rect><text class=\"value\" x=\"" + number(kLabelW + w + 4) + "\" y=\"" +
             number(y + kBarH - 3) + "\">" + xmlEscape(formatValue(v, chart.unit)) + "</text>";
    }
  }
  return out + "</svg>";
}

std::string lineChartSvg(const LineChart& chart) {
  constexpr double kLeft = 64, kPlotW = 600, kPlotH = 220, kRight = 24, kBottom = 44;
  std::vector<std::string> names;
  for (const auto& s : chart.series) names.push_back(s.name);
  const Legend keys = legend(names, kLeft, 16, kLeft + kPlotW + kRight);
  const double top = 34 + 16 * (keys.rows - 1);
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const auto& s : chart.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  x_lo = std::min(x_lo, 0.0);
  if (y_lo > 0 && y_lo < 0.5 * y_hi) y_lo = 0;  // start at zero unless that flattens the curve
  const std::vector<double> xt = niceTicks(x_lo, x_hi, 6);
  std::vector<double> yt = niceTicks(y_lo, y_hi, 5);
  if (yt.back() > chart.y_most && y_hi <= chart.y_most) {  // round ticks past what can be: stop at the limit
    yt.erase(std::remove_if(yt.begin(), yt.end(), [&](double t) { return t > chart.y_most; }), yt.end());
    if (yt.empty() || yt.back() < chart.y_most) yt.push_back(chart.y_most);
  }
  auto xOf = [&](double x) { return kLeft + kPlotW * (x - xt.front()) / (xt.back() - xt.front()); };
  auto yOf = [&](double y) { return top + kPlotH * (1 - (y - yt.front()) / (yt.back() - yt.front())); };
  const double width = kLeft + kPlotW + kRight, height = top + kPlotH + kBottom;

  std::string out = "<svg class=\"chart\" id=\"" + xmlEscape(chart.id) + "\" xmlns=\"http://www.w3.org/2000/svg\" "
                    "viewBox=\"0 0 " + number(width) + " " + number(height) + "\" width=\"" + number(width) + "\">";
  out += keys.svg;
  for (double t : xt)
    out += "<line class=\"grid\" x1=\"" + number(xOf(t)) + "\" x2=\"" + number(xOf(t)) + "\" y1=\"" + number(top) +
           "\" y2=\"" + number(top + kPlotH) + "\"/><text class=\"tick\" x=\"" + number(xOf(t)) + "\" y=\"" +
           number(top + kPlotH + 16) + "\" text-anchor=\"middle\">" + fmt(t) + "</text>";
  for (double t : yt)
    out += "<line class=\"grid\" x1=\"" + number(kLeft) + "\" x2=\"" + number(kLeft + kPlotW) + "\" y1=\"" +
           number(yOf(t)) + "\" y2=\"" + number(yOf(t)) + "\"/><text class=\"tick\" x=\"" + number(kLeft - 6) +
           "\" y=\"" + number(yOf(t) + 4) + "\" text-anchor=\"end\">" + fmt(t) + "</text>";
  out += "<text class=\"axis\" x=\"" + number(kLeft + kPlotW / 2) + "\" y=\"" + number(height - 6) +
         "\" text-anchor=\"middle\">" + xmlEscape(chart.x_label) + "</text>";
  out += "<text class=\"axis\" transform=\"translate(14 " + number(top + kPlotH / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + xmlEscape(chart.y_label) + "</text>";
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    const char* colour = kPalette[s % kPaletteSize];
    std::string path;
    for (const auto& [x, y] : chart.series[s].points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      path += (path.empty() ? "" : " ") + number(xOf(x)) + "," + number(yOf(y));
      if (chart.series[s].markers)
        out += "<circle cx=\"" + number(xOf(x)) + "\" cy=\"" + number(yOf(y)) + "\" r=\"3.5\" fill=\"" + colour +
               "\"><title>" + xmlEscape(chart.series[s].name + ": " + fmt(y, 4) + " at " + fmt(x, 4)) +
               "</title></circle>";
    }
    if (!path.empty())
      out += "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"1.6\" points=\"" + path +
             "\"/>";
  }
  return out + "</svg>";
}

}  // namespace pipetrain::report
