// An oracle for the planner under a fixed schedule: a search of plans that shares
// nothing with the exploration's DPs, proposals, bounds or pruning, only the simulator
// that judges both (bench/planner_oracle.cpp, explore_test.cpp). The planner's choice
// should be within a tie of the best plan the oracle finds.
//
// Its space: `copies` copies (replicated_pipeline.h) of a chain of stages on the first
// floor(devices / copies) devices of the cluster (in its order), each copy running its
// share of the micro-batches; stage s holds consecutive layers (graph order) on
// consecutive devices, any number of them (a stage's replicas may straddle part of a
// node, as PipeDream's optimizer allows). One copy is a plain chain plan, one stage on
// every device is data parallelism. Schedules that run several stages per rank
// (interleaved, zb-v, dualpipev) are outside it: their devices are placed by the
// schedule, and the exploration already tries every split of their layers where there
// are at most kEverySplitUpTo (neighbours.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/sim/evaluate.h"

namespace pipetrain::planner {

struct OracleOptions {
  std::string schedule = "1f1b";  // one stage per rank
  int64_t microbatch_size = 1;
  int microbatches = 1;           // per mini-batch, over all copies
  // Simulations in all: the exhaustive search refuses a space larger than this, the
  // local search stops at it.
  int64_t max_simulations = 100'000;
  // The local search: this many walks from random plans (spread over the copy counts),
  // beside those from the plans it is given.
  int restarts = 16;
  uint64_t seed = 1;
};

struct OracleResult {
  std::optional<plan::Plan> best;  // none where no plan of the space fits memory
  sim::Report report;              // the best's
  int64_t simulated = 0;           // plans simulated
  int walks = 0;                   // the local search's walks (from starts and at random)
};

// Every plan of the space, simulated. Error where there are more than max_simulations.
OracleResult searchEveryPlan(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                             const OracleOptions& options);

// Walks from each of `starts` that is a plan of the space with one copy (a chain plan),
// then from `restarts` random plans, to better simulated plans one move at a time while
// one beats the current by more than a tie (0.1%): a layer or device boundary moved by
// 1, 2, 4, ... places, a stage split or two merged, a device more or fewer at the end.
OracleResult searchLocally(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                           const OracleOptions& options, const std::vector<plan::Plan>& starts = {});

}  // namespace pipetrain::planner
