// Internal to the trace module: how times are written on axes, labels and tooltips.
//
// Everything here formats with fixed decimals and never consults the locale, so the
// same Timeline always gives byte-identical SVG (diffable, testable as text).
#pragma once

#include <string>
#include <vector>

namespace pipetrain::trace::axis {

// A display unit: "s", "ms" or "µs", and how many of it make one second.
struct TimeUnit {
  const char* symbol;
  double per_second;
};

// The largest unit in which `seconds` is at least 1 (µs for anything smaller).
TimeUnit unitFor(double seconds);

// Evenly spaced, human-friendly tick positions (multiples of 1, 2 or 5 × 10^k) from
// 0 up to `span`, at most about `max_ticks` of them.
struct Ticks {
  TimeUnit unit;
  double step = 0;              // seconds between ticks
  int decimals = 0;             // enough to tell neighbouring tick labels apart
  std::vector<double> seconds;  // the tick positions, starting at 0
};
// REQUIRES: span > 0, max_ticks >= 1.
Ticks niceTicks(double span, int max_ticks);

// Like text::fixed(), then trailing zeros (and a bare point) removed: for SVG coordinates.
std::string compact(double value, int decimals = 2);
// A duration with its own unit and about three significant digits: "26.0 ms", "1.25 s".
std::string duration(double seconds);

}  // namespace pipetrain::trace::axis
