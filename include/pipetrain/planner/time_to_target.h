// The time-to-accuracy objective: rank plans by the predicted seconds to reach a loss,
// not by samples per second. A plan's time is the samples its update rule needs for
// the target (calibration.h) over its simulated throughput:
//
//   seconds = samples the synchronous rule needed / efficiency(rule) / throughput
//
// Synchronous plans of one batch share a rule, so among them throughput decides as
// before; an asynchronous plan wins where its rule's progress per sample (PipeDream's
// step per micro-batch) outweighs what it loses in throughput or to staleness (2BW's
// one-step delay). Pollux ranks data-parallel jobs by throughput x statistical
// efficiency too, estimating the efficiency from the gradient noise; here it is
// measured, per rule, with the rule's delays.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pipetrain/planner/calibration.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/update_rule.h"

namespace pipetrain::planner {

// A rule to calibrate, with a plan that trains by it.
struct RuleToCalibrate {
  UpdateRule rule;
  plan::Plan plan;
};

// What calibration measures: the rule of the fastest synchronous plan (first), then of
// the fastest asynchronous plan of each schedule, pipelines and single stages apart,
// that trains by a rule not yet listed, in the ranking's order.
std::vector<RuleToCalibrate> rulesToCalibrate(const Exploration& e, const graph::LayerGraph& graph);

// Sets every candidate's to_target from the calibration and reorders e.ranked by it:
// calibrated plans by predicted seconds (throughput's order among ties), then the
// others by throughput. Keeps the throughput objective's choice in e.throughput_choice
// where it differs. Throws Error where the calibration has no synchronous progress.
void rankByTimeToTarget(Exploration& e, const graph::LayerGraph& graph, const Calibration& calibration);

// Measures the rules it is given (the same order); may take some from a cache.
using Calibrator = std::function<Calibration(const std::vector<RuleToCalibrate>&)>;

// explore() under the time-to-accuracy objective: the search keeps each schedule
// family's fastest plans, `calibrate` measures their rules, and the ranking is by
// predicted time to the target.
Exploration exploreForTimeToTarget(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                                   ExploreOptions options, const Calibrator& calibrate);

}  // namespace pipetrain::planner
