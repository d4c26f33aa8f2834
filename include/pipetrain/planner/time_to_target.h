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
//
// Which rules are measured is a branch and bound: a rule stepping every s samples
// where the synchronous rule steps every B can make at most B/s times its progress per
// sample (perfect linear scaling of the batch; staleness only loses), so a rule whose
// fastest plan could not beat the best time measured so far even then is not trained.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/planner/calibration.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/update_rule.h"

namespace pipetrain::planner {

// A rule to calibrate, with the fastest plan that trains by it.
struct RuleToCalibrate {
  UpdateRule rule;
  plan::Plan plan;
  double throughput = 0;  // the plan's simulated samples/s
};

// Where curves come from: a training run per rule (runtime/calibration.h), a file, a test.
class Calibrator {
 public:
  virtual ~Calibrator() = default;
  // Identity, samples per rule, and whatever curves it holds already (a cache).
  virtual Calibration& calibration() = 0;
  // Puts `rule`'s curve into calibration(), or with `repeat` the synchronous rule's on
  // another data order into calibration().repeat. Throws Error where it cannot.
  virtual void measure(const RuleToCalibrate& rule, bool repeat) = 0;
  // The seconds measure() spent training so far (not the planner's).
  virtual double trainingSeconds() const { return 0; }
};

// The most progress per sample a plan's rule could make against synchronous training
// at its batch: the batch over the fewest samples one of its steps combines, read off
// the schedule's step rule (no Program): m / (the fewest replicas of a stage) for a
// schedule that steps per micro-batch (PipeDream's replicas step per round), else 1.
// `fewest_replicas` 1 gives the bound for any plan of that schedule and micro-batching.
double mostProgressPerSample(const std::string& schedule, int microbatches, int fewest_replicas = 1);
double mostProgressPerSample(const plan::Plan& plan);

// Measures the synchronous rule of the fastest synchronous plan (twice; throws Error
// where there is none) and then, taking the asynchronous plans in
// order of the best time they could reach (the bound above), the rules of those that
// could still beat the best time measured, at most `max_rules` rules in all (the
// synchronous one included). Records in `e` how many rules were measured or taken from
// the calibrator's cache, how many plans the bound left out, and how many rules the limit.
const Calibration& calibrateRules(Exploration& e, UpdateRules& rules, Calibrator& calibrator, int max_rules);

// Sets every candidate's to_target from the calibration and reorders e.ranked by it:
// calibrated plans by predicted seconds (throughput's order among ties), then the
// others by throughput. An asynchronous plan whose bound cannot beat the best time is
// left without an estimate, its rule not looked at. An asynchronous winner whose time at
// the low end of its efficiency does not beat the fastest synchronous plan's gives way to
// that plan: calibration's noise could not tell their rules apart (e.ranking_notes says
// so). Keeps the throughput objective's choice in e.throughput_choice
// where it differs. Throws Error where the calibration has no synchronous progress.
// The time-to-accuracy objective (time_to_accuracy_objective.cpp) runs these two after
// the search.
void rankByTimeToTarget(Exploration& e, UpdateRules& rules, const Calibration& calibration);

}  // namespace pipetrain::planner
