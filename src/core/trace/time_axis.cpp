#include "time_axis.h"
#include "pipetrain/util/text.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>

namespace pipetrain::trace::axis {

TimeUnit unitFor(double seconds) {
  if (seconds >= 1) return {"s", 1};
  if (seconds >= 1e-3) return {"ms", 1e3};
  return {"\xC2\xB5s", 1e6};  // µs, UTF-8
}

Ticks niceTicks(double span, int max_ticks) {
  assert(span > 0 && max_ticks >= 1);
  Ticks ticks;
  ticks.unit = unitFor(span);
  // Pick the step in display units, so "0.5 ms" rather than "0.0005 s".
  const double raw = span * ticks.unit.per_second / max_ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * magnitude;
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * magnitude >= raw * (1 - 1e-9)) {
      step = m * magnitude;
      break;
    }
  }
  ticks.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  ticks.step = step / ticks.unit.per_second;
  // Integer multiples (not repeated addition) so that rounding cannot drift.
  const int count = static_cast<int>(std::floor(span / ticks.step * (1 + 1e-9)));
  for (int i = 0; i <= count; ++i) ticks.seconds.push_back(i * ticks.step);
  return ticks;
}

std::string compact(double value, int decimals) {
  std::string s = text::fixed(value, decimals);
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

std::string duration(double seconds) {
  if (seconds <= 0) return "0 s";
  const TimeUnit unit = unitFor(seconds);
  const double v = seconds * unit.per_second;
  const int decimals = v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return text::fixed(v, decimals) + " " + unit.symbol;
}

}  // namespace pipetrain::trace::axis
