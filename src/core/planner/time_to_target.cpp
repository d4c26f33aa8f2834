#include "pipetrain/planner/time_to_target.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner {
namespace {

bool samePlan(const plan::Plan& a, const plan::Plan& b) { return a.toJson() == b.toJson(); }

// Predicted seconds to the target for a plan of this throughput whose rule has this
// efficiency; infinite where either is zero.
double secondsToTarget(double yardstick_samples, double efficiency, double samples_per_second) {
  return efficiency > 0 && samples_per_second > 0 ? yardstick_samples / efficiency / samples_per_second : HUGE_VAL;
}

// The samples the synchronous rule took to the target.
double yardstickSamples(const Calibration& c) { return *c.curves.at(c.synchronous_key).samplesToReach(c.targetLoss()); }

}  // namespace

std::vector<RuleToCalibrate> distinctRules(const Exploration& e, UpdateRules& book) {
  std::vector<RuleToCalibrate> rules;
  std::map<std::string, bool> seen;
  for (const Candidate& c : e.ranked) {  // fastest first: each rule with its fastest plan
    const UpdateRule& rule = book.of(c.plan);
    if (!seen.emplace(rule.key, true).second) continue;
    rules.push_back({rule, c.plan, c.report.throughput});
  }
  const auto sync = std::find_if(rules.begin(), rules.end(), [](const RuleToCalibrate& r) { return r.rule.synchronous; });
  if (sync == rules.end())
    throw Error("time to accuracy measures every plan against synchronous training, and no synchronous plan fits "
                "here; plan for throughput, or allow a synchronous schedule (--schedule auto)");
  std::rotate(rules.begin(), sync, sync + 1);
  return rules;
}

const Calibration& calibrateRules(Exploration& e, UpdateRules& book, Calibrator& calibrator, int max_rules) {
  std::vector<RuleToCalibrate> rules = distinctRules(e, book);
  Calibration& c = calibrator.calibration();
  c.synchronous_key = rules.front().rule.key;
  // Whether the rule has a curve now (a calibrator reading a file may have none).
  auto measure = [&](const RuleToCalibrate& r) {
    if (c.curves.count(r.rule.key)) {
      ++e.rules_cached;
    } else {
      calibrator.measure(r, false);
      if (!c.curves.count(r.rule.key)) return false;
      ++e.rules_measured;
    }
    c.descriptions[r.rule.key] = r.rule.description;
    return true;
  };
  if (!measure(rules.front())) throw Error("internal: the calibrator has no curve of the synchronous rule");
  if (c.repeat.samples.size() < 2) calibrator.measure(rules.front(), true);
  const double yardstick = yardstickSamples(c);
  const double noise = c.noise();
  const double batch = static_cast<double>(rules.front().rule.samples_per_step);
  // The best a rule's fastest plan could do: perfect scaling to its smaller steps, with
  // the noise's benefit of the doubt.
  auto optimistic = [&](const RuleToCalibrate& r) {
    const double scaling = std::max(1.0, batch / static_cast<double>(std::max<int64_t>(1, r.rule.samples_per_step)));
    return secondsToTarget(yardstick, scaling * (1 + noise), r.throughput);
  };
  std::vector<RuleToCalibrate> rest(rules.begin() + 1, rules.end());
  std::stable_sort(rest.begin(), rest.end(),
                   [&](const RuleToCalibrate& a, const RuleToCalibrate& b) { return optimistic(a) < optimistic(b); });
  double best = secondsToTarget(yardstick, 1.0, rules.front().throughput);
  int calibrated = 1;
  for (const RuleToCalibrate& r : rest) {
    if (optimistic(r) >= best) {
      ++e.rules_bounded;
      continue;
    }
    if (calibrated >= max_rules && !c.curves.count(r.rule.key)) {
      ++e.rules_over_budget;
      continue;
    }
    if (!measure(r)) continue;
    ++calibrated;
    best = std::min(best, secondsToTarget(yardstick, efficiencyOf(c, r.rule.key)->value, r.throughput));
  }
  return c;
}

void rankByTimeToTarget(Exploration& e, UpdateRules& book, const Calibration& calibration) {
  const double target = calibration.targetLoss();
  const double yardstick = yardstickSamples(calibration);
  e.objective = Objective::kTimeToAccuracy;
  e.target_loss = target;
  e.calibration_samples = calibration.samples;
  e.calibration_noise = calibration.noise();
  const Candidate throughput_choice = e.ranked.front();
  for (Candidate& c : e.ranked) {
    TargetEstimate t;
    t.rule = book.of(c.plan).key;
    if (const std::optional<Efficiency> eff = efficiencyOf(calibration, t.rule)) {
      t.calibrated = true;
      t.reached = eff->reached;
      t.efficiency = eff->value;
      t.seconds = secondsToTarget(yardstick, eff->value, c.report.throughput);
      t.seconds_low = secondsToTarget(yardstick, eff->high, c.report.throughput);
      t.seconds_high = secondsToTarget(yardstick, eff->low, c.report.throughput);
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
                                   ExploreOptions options, Calibrator& calibrator, int max_rules) {
  options.objective = Objective::kTimeToAccuracy;
  Exploration e = explore(graph, cluster, options);
  // The planner's time includes finding the rules and ranking by them, not the
  // calibration's training (which its caller reports).
  auto start = std::chrono::steady_clock::now();
  UpdateRules book(graph);
  const Calibration& calibration = calibrateRules(e, book, calibrator, max_rules);
  const double calibrating = calibrator.trainingSeconds();
  rankByTimeToTarget(e, book, calibration);
  e.search_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - calibrating;
  return e;
}

}  // namespace pipetrain::planner
