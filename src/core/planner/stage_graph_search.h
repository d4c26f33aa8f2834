// The two searches behind solveGraph (graph_partition.h), for one bottleneck limit at a
// time: solveGraph bisects on the limit and asks one of them for the shallowest stage
// graph within it.
//  - The down-set search (down_set_search.cpp) tries every convex partition: exact, and
//    used where the model's down-set lattice is small.
//  - The series-parallel search (graph_partition.cpp) is GraphPipe's DP over the
//    series-parallel tree: polynomial, used everywhere else.
#pragma once

#include <limits>
#include <memory>

#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/planner/graph_partition.h"

namespace pipetrain::planner::detail {

constexpr int kNoPartition = std::numeric_limits<int>::max() / 4;

// Whether a memo entry solved under one bottleneck limit keeps its answer under
// `limit`: both searches keep their memo across the bisection's solves. Lowering the
// limit only removes partitions, so the shallowest one found stays the shallowest while
// its slowest stage or transfer (`worst`) still meets the limit, and a state without
// one (kNoPartition) stays without. The bisection's solves mostly tighten the limit.
template <class Entry>
bool stillHolds(const Entry& e, double limit) {
  return limit <= e.solved_at && (e.depth == kNoPartition || e.worst <= limit);
}

class StageGraphSearch {
 public:
  virtual ~StageGraphSearch() = default;
  // The depth of the shallowest stage graph whose every stage and transfer takes at most
  // `limit` seconds per mini-batch and whose every stage fits memory, or kNoPartition.
  // Of equally deep ones, the one on the fewest devices (devices after it stay idle).
  virtual int solve(double limit) = 0;
  // The partition the last solve() found, in a topological order of its stages, with its
  // real bottleneck as the objective.
  virtual GraphPartition partition() = 0;
  // Whether the search ran out of its work budget: its answers are then worthless.
  virtual bool gaveUp() const { return false; }
  // The DP transitions taken so far, over all solves. The tree's count against the
  // graph partitioner's budget (PartitionOptions::max_graph_steps); the down-set search
  // has a bound of its own.
  virtual int64_t steps() const = 0;
};

// The down-set search, or nullptr where the model has too many down-sets for it.
// `depth_floor`: memory is sized for at least this many stages to the end.
std::unique_ptr<StageGraphSearch> makeDownSetSearch(const graph::LayerGraph& graph, const ChainProblem& problem,
                                                    int depth_floor);

}  // namespace pipetrain::planner::detail
