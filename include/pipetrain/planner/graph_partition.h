// GraphPipe's partitioner (arXiv 2406.17145): cuts a multi-branch model into a *graph*
// of stages, so that independent branches run side by side on their own devices and
// the pipeline is as shallow as the branches allow.
//
// The search, as published. Binary search on the bottleneck T (seconds per mini-batch
// of the slowest stage or transfer, priced exactly as the chain DP prices them:
// ChainProblem::stageSeconds and the simulator's transfer formula). For one T, a
// memoised DP over the series-parallel tree (series_parallel.h) finds the shallowest
// stage graph whose every stage and transfer takes at most T and whose every stage
// fits its devices' memory. A region of the tree on a window of devices [d0, d1), with
// k stages after it on the way to the pipeline's end, is one of:
//  - one stage on a block of the window (replicas allowed where the chain DP allows
//    them), holding k + 1 micro-batches' activations under 1F1B-like schedules;
//  - a series split: a run of children, then the rest on the devices after it; the
//    second part is planned first, and its depth adds to k for the first part;
//  - a parallel split: a run of branches on the first devices of the window and the
//    other branches on the rest, each with the same k; the depth is the deeper one's.
//  - beyond the paper, a join (SpNode::joins): a run of a series node that starts at a
//    parallel child, as its first branches on the first devices and the other branches
//    with the children after them, planned as a series, on the rest (so a stage may
//    hold a branch's tail and the layers that merge the branches, as sequential plans'
//    stages do); the depths add, as for a series split.
// The smallest feasible T wins, then the smallest depth (GraphPipe's in-flight
// micro-batches at the input stage). Devices are laid out in the tree's order, so a
// stage's replicas sit next to each other as in the chain DP, on hierarchical and
// heterogeneous clusters alike.
//
// What it does not see: a series split's transfers are priced as one message of all
// the bytes crossing it, on the link between the two parts' adjacent devices. The
// simulator, which ranks the plans, sees every message on its own route.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner {

struct GraphStage {
  std::vector<int> layers;            // topological order
  int first_device = 0, end_device = 0;
  int depth = 1;                      // stages on its longest path to the end, itself included
};

struct GraphPartition {
  std::vector<GraphStage> stages;     // in a topological order of the stage graph
  double objective = 0;               // T: seconds per mini-batch of the slowest stage or transfer
  int depth = 0;                      // stages on the longest path (the input stages' depth)
  std::vector<std::string> notes;     // parts of the graph that were not series-parallel
  bool every_convex_partition = false;  // found by the down-set search (see solveGraph)
  int64_t search_steps = 0;             // the tree search's DP transitions (its budget bounds them)
};

// The tree's search ran past PartitionOptions::max_graph_steps.
class GraphSearchGaveUp : public Error {
 public:
  using Error::Error;
};

// Which search finds the stage graph for one bottleneck limit.
enum class GraphSearch {
  kAuto,             // every convex partition where the model has few down-sets, else the tree
  kSeriesParallel,   // the DP over the series-parallel tree described above
};

// The partition described above. Uses the schedule, micro-batching, device limit and
// replica limit of `options` (assumed_depth and max_blocks do not apply: depths are
// exact, layers are not grouped). Throws Error when no partition fits memory, or when
// the tree's search runs past its budget of DP transitions (large models on tens of
// devices: PipeDream's ResNet-50 on 16 took 23 s unbounded).
//
// Small models get more than the tree's stages. Listed in a topological order, a stage
// graph's stages are the differences of a chain of down-sets of the layer graph (sets
// that hold each of their layers' producers), so where a model has few down-sets (up to
// thousands, such as branches a few layers long on tens of devices) a DP over them tries
// every convex partition under the same device layout and prices: the optimum, also
// where the graph is not series-parallel. kSeriesParallel forces the tree's search.
// The two searches price a transfer differently (the tree: all bytes crossing a series
// split on the link between its parts; down-sets: each stage's message to each consumer
// stage on their own route), both approximations of what the simulator sees, so the
// exploration proposes both plans where the down-set search runs.
GraphPartition solveGraph(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                          const PartitionOptions& options, GraphSearch search = GraphSearch::kAuto);

// Whether every stage fits its devices under `options`' schedule (memory sized for each
// stage's depth, or the whole pipeline's under zero-bubble schedules): a partition found
// without memory checks (check_memory false) may then serve that schedule as it is.
bool fitsMemory(const GraphPartition& partition, const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                const PartitionOptions& options);

// The Plan of a partition (layer and device names, schedule options as given).
plan::Plan toPlan(const GraphPartition& partition, const graph::LayerGraph& graph,
                  const cluster::ClusterSpec& cluster, const PartitionOptions& options,
                  const plan::ScheduleOptions& schedule);

struct GraphPlan {
  plan::Plan plan;
  GraphPartition partition;
};
GraphPlan partitionGraph(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                         const PartitionOptions& options, const plan::ScheduleOptions& schedule,
                         GraphSearch search = GraphSearch::kAuto);

}  // namespace pipetrain::planner
