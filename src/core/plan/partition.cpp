#include "pipetrain/plan/partition.h"

#include <algorithm>
#include <limits>

#include "pipetrain/util/error.h"

namespace pipetrain::plan {

std::vector<int> balancedChainSplit(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  if (parts < 1) throw Error("cannot split a model into " + std::to_string(parts) + " stages");
  if (n < parts)
    throw Error("cannot split " + std::to_string(n) + " layers into " + std::to_string(parts) +
                " stages: each stage needs at least one layer");
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  // best[k][j]: the smallest possible maximum run over the first j layers in k runs.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(parts + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= parts; ++k)
    for (int j = k; j <= n; ++j)
      for (int i = k - 1; i < j; ++i) {
        const double v = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (v < best[k][j]) {
          best[k][j] = v;
          cut[k][j] = i;
        }
      }
  std::vector<int> bounds(parts + 1, n);
  for (int k = parts, j = n; k > 0; --k) {
    bounds[k] = j;
    j = cut[k][j];
    bounds[k - 1] = j;
  }
  return bounds;
}

}  // namespace pipetrain::plan
