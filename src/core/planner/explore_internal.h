// What the exploration (explore.cpp, propose.cpp, explorer.cpp, refine.cpp),
// combinations.cpp (what it tries) and exploration_summary.cpp (its explanations) share.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/sim/evaluate.h"

namespace pipetrain::planner::detail {

// Throughputs within 0.1% tie (the simulator's differences that small are rounding): they
// fall into one bucket of kTie on a log scale. explore() ranks by it and whySlower()
// explains by it, so that a "tie" means one thing.
inline const double kTie = std::log(1.001);
inline int64_t throughputTier(const sim::Report& r) {
  return static_cast<int64_t>(std::floor(std::log(r.throughput) / kTie));
}

// A device runs one rank (several stages under interleaved and V schedules).
inline int devicesUsed(const plan::Plan& p) { return static_cast<int>(plan::rankDeviceNames(p).size()); }

// Interleaved 1F1B's chunks per rank in the exploration.
constexpr int kInterleavedChunks = 2;

// The micro-batch sizes to try: the given ones, or defaultMicrobatchSizes; either way
// only those giving at most limits::kMaxMicrobatches micro-batches of a servable size.
// Error where a given size does not divide the batch.
std::vector<int64_t> microbatchSizes(const ExploreOptions& o, int64_t smallest_timed);
// The servable default sizes below the profile's smallest timed size, smallest first.
std::vector<int64_t> smallerMicrobatchSizes(const ExploreOptions& o, int64_t smallest_timed);
// Error: no size serves the batch.
[[noreturn]] void throwUnservable(const ExploreOptions& o);
// The widths to try on `devices`: the powers of two below it, and all of them.
std::vector<int> widths(int devices);
// Shapes of device blocks for a pipeline on `width` devices, each as the stages' first
// devices and the end: k equal blocks of q devices for each q in `part_sizes` (k from 2
// to kMaxShapeStages, within the width), and a replicated stage followed by 1 to
// kShapeTailDevices single devices (PipeDream's convolutions replicated, its classifier
// not). Under `use_all_devices` only those that tile the width.
inline constexpr int kMaxShapeStages = 8;
inline constexpr int kShapeTailDevices = 3;
std::vector<std::vector<int>> deviceShapes(int width, const std::vector<int>& part_sizes, bool use_all_devices);
// A multi-stage schedule's plan on `width` ranks, its layers balanced by compute.
plan::Plan multiStagePlan(const std::string& name, const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                          int width, int64_t microbatch_size, int microbatches);

}  // namespace pipetrain::planner::detail
