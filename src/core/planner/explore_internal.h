// What explore.cpp (the search) and exploration_summary.cpp (its explanations) must
// agree on.
#pragma once

#include <cmath>
#include <cstdint>

#include "pipetrain/plan/plan.h"
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
inline int devicesUsed(const plan::Plan& p) { return static_cast<int>(plan::rankDevices(p).size()); }

}  // namespace pipetrain::planner::detail
