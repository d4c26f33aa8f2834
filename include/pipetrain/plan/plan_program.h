// The one path from a Plan to the Program it means. The simulator, the planner's
// scoring, the launcher's checks and every training rank call programForPlan(); nothing
// else builds a Program from a plan's fields.
//
// Ranks are numbered as the Program numbers them: stage by stage, replica by replica;
// when a rank runs several stages (interleaved, V) rank r is the device of stage r.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/schedule/program.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/schedule/weight_versions.h"

namespace pipetrain::plan {

// The ranks of each stage's replicas (one rank per stage when a rank runs several).
std::vector<std::vector<int>> stageRanks(const Plan& plan);

// The devices of the Program's ranks, in rank order (names from the plan).
std::vector<std::string> rankDeviceNames(const Plan& plan);

// Data-parallel replicas per stage (1 each when a rank runs several stages).
std::vector<int> stageReplicas(const Plan& plan);

// The stage DAG of a plan over a graph. REQUIRES: validate(plan, graph, ...) passed.
schedule::StageDag stageDag(const Plan& plan, const graph::LayerGraph& graph);

// Generated, lowered and validated: the Program a plan means over `minibatches`
// mini-batches. Throws Error if the schedule cannot use the plan's numbers.
// Whether programForPlan checks the Program it builds (schedule::validate). The
// planner's extrapolation builds one plan at several micro-batch counts and checks the
// first only (the validator took a sixth of its time); the simulator still refuses a
// Program that stalls.
enum class Check { kValidate, kSkip };
schedule::Program programForPlan(const Plan& plan, const schedule::StageDag& dag, int minibatches = 1,
                                 Check check = Check::kValidate);

// What the stage's weight versions cost its actions (schedule::versionSeconds): its
// layers' profiled copies (graph::WeightVersionSeconds) and how the runtime runs a
// backward pass on a recomputing stage.
schedule::StageVersionCosts stageVersionCosts(const Stage& stage, const graph::LayerGraph& graph);

// Weight-sized buffers a rank holds per stage beyond the Program's versions, one
// gradient buffer and optimizer state: PipeMare's discrepancy correction keeps the
// velocity and builds the corrected weights of each backward pass in a second buffer.
int extraWeightBuffers(const ScheduleOptions& options);

// A chain plan over `layers` (in model order): stage s holds layers [bounds[s],
// bounds[s+1]) and runs on `replicas[s]` devices (empty = one each), named `dev0`,
// `dev1`, ... in rank order; when a rank runs several stages, stage s runs on the device
// its schedule's placement gives (schedule_traits.h). Throws Error on bounds that do not cover the layers in order.
Plan chainPlan(const std::vector<std::string>& layers, const std::vector<int>& bounds,
               const std::vector<int>& replicas, const ScheduleOptions& schedule, int64_t microbatch_size,
               int microbatches);

}  // namespace pipetrain::plan
