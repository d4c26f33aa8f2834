// Balanced contiguous split of a chain of layers: the simplest partitioner (the
// exploration's interleaved plans use it; the DP planner is chain_partition.h).
#pragma once

#include <vector>

namespace pipetrain::plan {

// Splits `costs` (one per layer, in order) into `parts` non-empty runs minimising the
// largest run's sum. Returns the `parts + 1` boundaries: run i is [b[i], b[i+1]).
// Throws Error when there are fewer layers than parts.
std::vector<int> balancedChainSplit(const std::vector<double>& costs, int parts);

}  // namespace pipetrain::plan
