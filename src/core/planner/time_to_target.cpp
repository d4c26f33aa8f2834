#include "pipetrain/planner/time_to_target.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner {
namespace {

// As the explorer keeps them apart: synchronous plans, and each asynchronous schedule's
// pipelines and single stages.
std::string familyOf(const plan::Plan& plan) {
  if (!schedule::isAsynchronous(plan.schedule.name)) return "";
  return plan.schedule.name + (plan.numStages() == 1 ? " on one stage" : "");
}

bool samePlan(const plan::Plan& a, const plan::Plan& b) { return a.toJson() == b.toJson(); }

}  // namespace

std::vector<RuleToCalibrate> rulesToCalibrate(const Exploration& e, const graph::LayerGraph& graph) {
  std::vector<RuleToCalibrate> rules;
  std::set<std::string> families, keys;
  // The yardstick first: every plan's efficiency is relative to the synchronous rule.
  // Then each asynchronous family's fastest plan that trains by a rule not yet listed
  // (PipeDream on one replicated stage trains as synchronous SGD does).
  for (bool synchronous : {true, false})
    for (const Candidate& c : e.ranked) {
      const std::string family = familyOf(c.plan);
      if (family.empty() != synchronous || families.count(family)) continue;
      UpdateRule rule = updateRuleOf(c.plan, graph);
      if (rule.synchronous != synchronous) continue;
      families.insert(family);
      if (keys.insert(rule.key).second) rules.push_back({std::move(rule), c.plan});
    }
  return rules;
}

void rankByTimeToTarget(Exploration& e, const graph::LayerGraph& graph, const Calibration& calibration) {
  const double target = calibration.targetLoss();
  const double yardstick_samples = *calibration.curves.at(calibration.synchronous_key).samplesToReach(target);
  e.objective = Objective::kTimeToAccuracy;
  e.target_loss = target;
  e.calibration_samples = calibration.samples;
  e.calibration_noise = calibration.noise();
  const Candidate throughput_choice = e.ranked.front();
  for (Candidate& c : e.ranked) {
    TargetEstimate t;
    t.rule = updateRuleOf(c.plan, graph).key;
    if (const std::optional<Efficiency> eff = efficiencyOf(calibration, t.rule)) {
      t.calibrated = true;
      t.reached = eff->reached;
      t.efficiency = eff->value;
      const double samples_per_second = c.report.throughput;
      auto seconds = [&](double efficiency) {
        return efficiency > 0 && samples_per_second > 0 ? yardstick_samples / efficiency / samples_per_second : HUGE_VAL;
      };
      t.seconds = seconds(eff->value);
      t.seconds_low = seconds(eff->high);
      t.seconds_high = seconds(eff->low);
    }
    c.to_target = t;
  }
  // Calibrated plans by predicted time; the rest after them, in throughput's order.
  std::stable_sort(e.ranked.begin(), e.ranked.end(), [](const Candidate& a, const Candidate& b) {
    const TargetEstimate &x = a.to_target.value(), &y = b.to_target.value();
    if (x.calibrated != y.calibrated) return x.calibrated;
    if (!x.calibrated) return false;
    if (x.seconds != y.seconds) return x.seconds < y.seconds;
    // The same time by the same rule: a synchronous schedule's plan first.
    return !schedule::isAsynchronous(a.plan.schedule.name) && schedule::isAsynchronous(b.plan.schedule.name);
  });
  // Where throughput's choice trains by the winner's rule and its prediction is within
  // the profile's noise of the winner's, the two are equals: throughput's choice stays
  // (explore() chose it among equals by its shape).
  auto kept = std::find_if(e.ranked.begin(), e.ranked.end(),
                           [&](const Candidate& c) { return samePlan(c.plan, throughput_choice.plan); });
  const TargetEstimate& best = *e.ranked.front().to_target;
  if (kept != e.ranked.end() && kept->to_target->rule == best.rule &&
      kept->to_target->seconds <= best.seconds * (1 + std::max(e.noise, 1e-3)))
    std::rotate(e.ranked.begin(), kept, kept + 1);
  if (samePlan(e.ranked.front().plan, throughput_choice.plan)) return;
  e.throughput_choice = *std::find_if(e.ranked.begin(), e.ranked.end(),
                                      [&](const Candidate& c) { return samePlan(c.plan, throughput_choice.plan); });
}

Exploration exploreForTimeToTarget(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                                   ExploreOptions options, const Calibrator& calibrate) {
  options.objective = Objective::kTimeToAccuracy;
  Exploration e = explore(graph, cluster, options);
  // The planner's time includes choosing the rules and ranking by them, not the
  // calibration's training (which its caller reports).
  auto seconds = [](auto from) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
  };
  auto start = std::chrono::steady_clock::now();
  const std::vector<RuleToCalibrate> rules = rulesToCalibrate(e, graph);
  e.search_seconds += seconds(start);
  const Calibration calibration = calibrate(rules);
  start = std::chrono::steady_clock::now();
  rankByTimeToTarget(e, graph, calibration);
  e.search_seconds += seconds(start);
  return e;
}

}  // namespace pipetrain::planner
