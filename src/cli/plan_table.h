// The ranked table of an exploration, as `plan` and `train` (without a plan) print it.
#pragma once

#include <string>

#include "pipetrain/planner/explore.h"

namespace pipetrain::cli {

// "2x[1] + 1x[2]" style: stages with their replica counts, run-length encoded.
std::string stageShape(const plan::Plan& plan);

void printExploration(const planner::Exploration& e, int top);

}  // namespace pipetrain::cli
