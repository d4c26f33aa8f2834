// The ranked table of an exploration, as `plan` and `train` (without a plan) print it
// and as the report shows it: one table, built once.
#pragma once

#include <string>

#include "pipetrain/planner/explore.h"
#include "pipetrain/report/report.h"

namespace pipetrain::report {

// The best `top` candidates, the chosen one highlighted.
Table explorationTable(const planner::Exploration& e, int top);
// The sentences printed under the table (counts, the runner-up, warnings, the choice).
std::vector<std::string> explorationNotes(const planner::Exploration& e);

}  // namespace pipetrain::report
