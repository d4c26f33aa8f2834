// The most samples per second any simulation of a plan can report, from what its
// resources must do per mini-batch, without simulating it: no rank computes faster than
// its share of the micro-batches (and the host time of its messages), and no network
// port moves the bytes routed through it faster than its bandwidth. The planner ranks
// proposals by it and leaves unsimulated those whose bound cannot beat the best plan
// simulated so far; a plan starved by a slow link (PipeDream's GNMT cut into 18 stages
// over 3 GB/s) is bounded by its busiest port, far below its compute's bound.
#pragma once

#include <string>

#include "pipetrain/sim/cost_model.h"

namespace pipetrain::sim {

double throughputBound(const CostModel& costs);

// What a bound from loads alone is multiplied by under `schedule`: an asynchronous
// schedule never drains, and its report is the mean mini-batch of a window after the
// first (kSteadyWindow), whose work may start while the first still runs, in gaps that
// a load does not see; the window is allowed one more mini-batch. 1 for the others.
double windowAllowance(const std::string& schedule);

}  // namespace pipetrain::sim
