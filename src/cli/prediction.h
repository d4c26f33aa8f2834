// The simulator's prediction for a run that just happened: the measured per-stage
// compute times of the last mini-batch, priced with this machine's loopback Gloo, fed
// through the same schedule. Side by side with the measured bubbles it separates what
// the schedule costs from what communication and the framework add.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/sim/evaluate.h"
#include "pipetrain/trace/timeline.h"

namespace pipetrain::cli {

// This machine's ranks as a cluster: `ranks` CPU devices that share loopback Gloo
// (bandwidth and latency as measured on these machines, docs/runtime.md), each with `memory_bytes`.
cluster::ClusterSpec localCluster(int ranks, int64_t memory_bytes);

struct MeasuredRun {
  std::string schedule;
  int chunks = 1;
  int microbatches = 1;
  int64_t microbatch_size = 1;
  const trace::Timeline* timeline = nullptr;  // measured, a row per rank
  std::vector<int64_t> stage_output_bytes;
  std::vector<int64_t> stage_param_bytes;     // what replicas all-reduce
  std::vector<int> stage_replicas;            // empty = one rank per stage
};

sim::Report predictRun(const MeasuredRun& run);

}  // namespace pipetrain::cli
