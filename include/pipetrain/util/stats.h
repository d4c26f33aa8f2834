// Small statistics shared by the profilers and the runtime.
#pragma once

#include <algorithm>
#include <vector>

namespace pipetrain::util {

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const std::size_t n = values.size();
  std::nth_element(values.begin(), values.begin() + n / 2, values.end());
  const double upper = values[n / 2];
  if (n % 2) return upper;
  return (*std::max_element(values.begin(), values.begin() + n / 2) + upper) / 2;
}

// The mean of `values`, each counted at most `cap` times their median; 0 when empty.
// REQUIRES: cap >= 1.
inline double cappedMean(const std::vector<double>& values, double cap) {
  if (values.empty()) return 0;
  const double ceiling = cap * median(values);
  double sum = 0;
  for (double v : values) sum += std::min(v, ceiling);
  return sum / static_cast<double>(values.size());
}

}  // namespace pipetrain::util
