// Discrete-event execution of a Program on a CostModel.
//
// Each rank runs its actions in order. Compute occupies the rank; a SEND costs the
// rank nothing and puts a message on the route's ports, where it waits for earlier
// messages on the same port (contention) and then takes latency + bytes/bandwidth; a
// RECV waits for its message's arrival. So communication overlaps compute exactly as
// far as the schedule allows. Replicas meet at ALLREDUCE and leave together. Ranks on
// devices that share cores (ClusterSpec's shared_cores) share them: a compute action's
// end then depends on what starts beside it, so it is settled when it finishes.
// Events are processed in time order, so ports serve messages first come, first served.
#pragma once

#include <vector>

#include "pipetrain/schedule/program.h"
#include "pipetrain/sim/cost_model.h"
#include "pipetrain/trace/timeline.h"

namespace pipetrain::sim {

// REQUIRES: schedule::validate(program) passed and the program's ranks and stages are
// the cost model's.
trace::Timeline simulate(const schedule::Program& program, const CostModel& costs);

// What the planner needs of a simulation, without the timeline (recording it took a
// fifth of the planner's time): bitwise what the timeline's makespan(), busySeconds()
// and the transfers' wire time per port come to.
struct Totals {
  double makespan = 0;
  std::vector<double> busy;       // per rank: Timeline::busySeconds
  std::vector<double> port_wire;  // per network port: seconds its transfers occupy it
};
Totals simulateTotals(const schedule::Program& program, const CostModel& costs);

}  // namespace pipetrain::sim
