// A profile brought to the cluster it is planned for. A profile's times hold for the
// threads it was timed on (graph::ProfiledAs::threads); a CPU device of the cluster
// computes on its own (cluster::Device::threads). One process that timed the whole model
// on both cores of a 2-core machine (`pipetrain profile` without --threads) is faster per
// layer than each of two ranks on one core: gpt profiled so and planned as it was for two
// local ranks was predicted 860-881 samples/s and measured 443 (bench/prediction_cases.py,
// docs/profiling.md#a-profile-taken-on-other-threads).
#pragma once

#include <string>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"

namespace pipetrain::planner {

struct ProfileFit {
  cluster::ClusterSpec cluster;  // the cluster, each CPU device's speed at the threads it computes on
  std::string note;              // what was brought to which threads, or why the prices are likely off; "" if neither
};

// The cluster with each CPU device that says its threads, where they differ from the
// profile's, at the speed the profile's times have on them: a device on fewer threads
// from a profile that measured its step's speed-up over one thread
// (ProfiledAs::thread_speedup) is slowed by threadTimeFactor. Where that cannot be done
// (no speed-up measured, more threads than profiled, or devices that do not say their
// threads while one process timed the whole model on several), the device is priced as
// profiled and the note says so and what to do instead.
ProfileFit fitProfileToCluster(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster);

// How many times longer a step takes on `threads` than on the `profiled` threads it was
// timed on, where it ran `speedup` times faster on `profiled` threads than on one:
// Amdahl's law through those two points (a serial part and a part that divides over the
// threads). On one thread, the measured speed-up itself; between, the speed-up is taken
// within [1, profiled], what the law can describe.
// REQUIRES: profiled >= 1, threads >= 1, speedup > 0.
double threadTimeFactor(int profiled, double speedup, int threads);

}  // namespace pipetrain::planner
