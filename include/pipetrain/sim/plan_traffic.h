// What a plan sends between its ranks per mini-batch, by the link each message crosses:
// the activations its stages hand on and the gradients that come back, and its replicas'
// gradient all-reduces. Where a job spans hosts joined by a slow network, this is what
// the planner kept off the network, or could not (PipeDream's case against data
// parallelism: a pipeline sends activations where replicas all-reduce every weight).
#pragma once

#include <string>
#include <vector>

#include "pipetrain/sim/cost_model.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::sim {

struct LinkTraffic {
  std::string link;        // the level (or explicit link) crossed: cluster::ClusterSpec::routeName
  std::string what;        // "stages 0 -> 1", or "stage 1's all-reduce (2 replicas)"
  double bytes = 0;        // per mini-batch, every message of it, both ways
  double wire_seconds = 0; // those bytes at the link's rate (its all-reduce rate for all-reduces), per mini-batch
};

// One entry per pair of stages that talk and per replicated stage, in stage order; a
// plan whose ranks never talk has none. An all-reduce's bytes are what each replica sends
// in the ring, 2(n-1)/n of the stage's gradients, on the slowest link of the ring.
std::vector<LinkTraffic> planTraffic(const CostModel& cost);

// [{"link", "what", "bytes", "wire_seconds"}, ...]
json_io::Json trafficToJson(const std::vector<LinkTraffic>& traffic);

}  // namespace pipetrain::sim
