// The ranked table of an exploration on the console, as `plan` and `train` (without a
// plan) print it; the table itself is report::explorationTable, the report's too.
#pragma once

#include "pipetrain/planner/explore.h"

namespace pipetrain::cli {

void printExploration(const planner::Exploration& e, int top);

}  // namespace pipetrain::cli
