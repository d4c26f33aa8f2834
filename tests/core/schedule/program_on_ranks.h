// A generator's Program on a chain of stages, as the schedule tests build it: `ranks`
// ranks (each with the stages its placement gives it), or a stage per entry of `replicas`
// with that many replicas.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/schedules.h"

namespace pipetrain::schedule {

inline Program programOnRanks(const std::string& name, int ranks, int m, int minibatches,
                              const std::vector<int>& replicas = {}) {
  ScheduleSpec spec;
  spec.name = name;
  spec.microbatches = m;
  spec.minibatches = minibatches;
  spec.chunks = traits(name).placement == Placement::kLooped ? 2 : 1;
  const int stages =
      replicas.empty() ? ranks * stagesPerRank(traits(name), spec.chunks) : static_cast<int>(replicas.size());
  return buildProgram(spec, chainDag(stages), replicas);
}

}  // namespace pipetrain::schedule
