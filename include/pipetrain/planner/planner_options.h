// The planner's options that `plan` and `train` share, declared once
// (util/option_table.h).
#pragma once

#include <string>

#include "pipetrain/planner/explore.h"
#include "pipetrain/util/option_table.h"

namespace pipetrain::planner {

// partitioner: chain, graph or auto.
options::Option partitionerOption(Partitioner& partitioner, const std::string& group);
// recompute: auto, none or full.
options::Option recomputeOption(Recompute& recompute, const std::string& group);
// objective: one of objectives(), each named with what it ranks by; `context` opens
// the help ("without --plan: ").
options::Option objectiveOption(const PlanObjective*& objective, const std::string& group,
                                const std::string& context);

}  // namespace pipetrain::planner
