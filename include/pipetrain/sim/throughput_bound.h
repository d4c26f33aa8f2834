// The most samples per second any simulation of a plan can report, from what its
// resources must do per mini-batch, without simulating it: no rank computes faster than
// its share of the micro-batches (and the host time of its messages), and no network
// port moves the bytes routed through it faster than its bandwidth. The planner ranks
// proposals by it and leaves unsimulated those whose bound cannot beat the best plan
// simulated so far; a plan starved by a slow link (PipeDream's GNMT cut into 18 stages
// over 3 GB/s) is bounded by its busiest port, far below its compute's bound.
#pragma once

#include "pipetrain/sim/cost_model.h"

namespace pipetrain::sim {

double throughputBound(const CostModel& costs);

}  // namespace pipetrain::sim
