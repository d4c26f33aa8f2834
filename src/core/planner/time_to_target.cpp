#include "pipetrain/planner/time_to_target.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::planner {
namespace {

// Predicted seconds to the target for a plan of this throughput whose rule has this
// efficiency; infinite where either is zero.
double secondsToTarget(double yardstick_samples, double efficiency, double samples_per_second) {
  return efficiency > 0 && samples_per_second > 0 ? yardstick_samples / efficiency / samples_per_second : HUGE_VAL;
}

// The samples the synchronous rule took to the target.
double yardstickSamples(const Calibration& c) { return *c.curves.at(c.synchronous_key).samplesToReach(c.targetLoss()); }

}  // namespace

double mostProgressPerSample(const std::string& schedule, int microbatches, int fewest_replicas) {
  if (schedule::traits(schedule).step_rule != schedule::StepRule::kPerMicrobatch) return 1.0;
  return std::max(1.0, static_cast<double>(microbatches) / std::max(1, fewest_replicas));
}

double mostProgressPerSample(const plan::Plan& plan) {
  const std::vector<int> replicas = plan::stageReplicas(plan);
  return mostProgressPerSample(plan.schedule.name, plan.microbatches, *std::min_element(replicas.begin(), replicas.end()));
}

namespace {

// The fastest plan of a synchronous schedule: the yardstick's. Throws Error where none.
const Candidate& fastestSynchronous(const Exploration& e) {
  for (const Candidate& c : e.ranked)
    if (!schedule::isAsynchronous(c.plan.schedule.name)) return c;
  throw Error("time to accuracy measures every plan against synchronous training, and no synchronous plan fits "
              "here; plan for throughput, or allow a synchronous schedule (--schedule auto)");
}

// The asynchronous plans by the best time they could reach, with that time: the
// yardstick's samples over their most progress per sample, the noise in their favour.
std::vector<std::pair<double, Candidate*>> byBestPossibleTime(Exploration& e, double yardstick, double noise) {
  std::vector<std::pair<double, Candidate*>> order;
  for (Candidate& c : e.ranked)
    if (schedule::isAsynchronous(c.plan.schedule.name))
      order.push_back({secondsToTarget(yardstick, mostProgressPerSample(c.plan) * (1 + noise), c.report.throughput), &c});
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return order;
}

}  // namespace

const Calibration& calibrateRules(Exploration& e, UpdateRules& book, Calibrator& calibrator, int max_rules) {
  const Candidate& yardstick_plan = fastestSynchronous(e);
  const UpdateRule& sync_rule = book.of(yardstick_plan.plan);
  Calibration& c = calibrator.calibration();
  c.synchronous_key = sync_rule.key;
  // Whether the rule has a curve now (a calibrator reading a file may have none).
  auto measure = [&](const UpdateRule& rule, const Candidate& by) {
    if (c.curves.count(rule.key)) {
      ++e.rules_cached;
    } else {
      calibrator.measure({rule, by.plan, by.report.throughput}, false);
      if (!c.curves.count(rule.key)) return false;
      ++e.rules_measured;
    }
    return true;
  };
  if (!measure(sync_rule, yardstick_plan)) throw Error("internal: the calibrator has no curve of the synchronous rule");
  if (c.repeat.samples.size() < 2) calibrator.measure({sync_rule, yardstick_plan.plan, yardstick_plan.report.throughput}, true);
  const double yardstick = yardstickSamples(c);
  double best = secondsToTarget(yardstick, 1.0, yardstick_plan.report.throughput);
  int calibrated = 1;
  std::map<std::string, bool> tried;  // by key: whether it has a curve
  tried[sync_rule.key] = true;
  const std::vector<std::pair<double, Candidate*>> order = byBestPossibleTime(e, yardstick, c.noise());
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i].first >= best) {
      e.plans_bounded += static_cast<int>(order.size() - i);
      break;
    }
    const Candidate& candidate = *order[i].second;
    const UpdateRule& rule = book.of(candidate.plan);
    auto it = tried.find(rule.key);
    if (it == tried.end()) {
      if (calibrated >= max_rules && !c.curves.count(rule.key)) {
        ++e.rules_over_budget;
        it = tried.emplace(rule.key, false).first;
      } else {
        const bool has_curve = measure(rule, candidate);
        calibrated += has_curve;
        it = tried.emplace(rule.key, has_curve).first;
      }
    }
    if (it->second)
      best = std::min(best, secondsToTarget(yardstick, efficiencyOf(c, rule.key)->value, candidate.report.throughput));
  }
  return c;
}

void rankByTimeToTarget(Exploration& e, UpdateRules& book, const Calibration& calibration) {
  const double target = calibration.targetLoss();
  const double yardstick = yardstickSamples(calibration);
  e.target_loss = target;
  e.calibration_samples = calibration.samples;
  e.calibration_noise = calibration.noise();
  const json_io::Json chosen = e.ranked.front().plan.toJson();  // throughput's choice
  auto isThroughputChoice = [&](const Candidate& c) { return c.plan.toJson() == chosen; };
  double best = HUGE_VAL;
  auto estimate = [&](Candidate& c) {
    TargetEstimate t;
    t.rule = book.of(c.plan).key;
    if (const std::optional<Efficiency> eff = efficiencyOf(calibration, t.rule)) {
      t.calibrated = true;
      t.reached = eff->reached;
      t.efficiency = eff->value;
      t.seconds = secondsToTarget(yardstick, eff->value, c.report.throughput);
      t.seconds_low = secondsToTarget(yardstick, eff->high, c.report.throughput);
      t.seconds_high = secondsToTarget(yardstick, eff->low, c.report.throughput);
      best = std::min(best, t.seconds);
    }
    c.to_target = t;
  };
  for (Candidate& c : e.ranked)
    if (!schedule::isAsynchronous(c.plan.schedule.name)) estimate(c);
  for (const auto& [possible, c] : byBestPossibleTime(e, yardstick, e.calibration_noise)) {
    if (possible < best) estimate(*c);
    else c->to_target = TargetEstimate{};  // cannot win: no estimate
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
  // An asynchronous winner must beat the best synchronous plan beyond the calibration's
  // noise: at the low end of its efficiency (seconds_high). Otherwise calibration could
  // not tell the rules apart, and the plan that trains as single-process training does
  // is chosen. (vgg11 on Fashion-MNIST at 1 Gb/s: calibration's 512 samples moved the
  // synchronous rule's loss from 2.297 to 2.285 and its repeat's not at all, a noise of
  // +-100%; PipeDream and PipeMare, ranked first on that noise, never reached the 75%
  // that the synchronous plan reached in 10,240 samples.)
  const TargetEstimate& leader = *e.ranked.front().to_target;
  if (schedule::isAsynchronous(e.ranked.front().plan.schedule.name) && leader.calibrated) {
    const auto sync = std::find_if(e.ranked.begin(), e.ranked.end(), [](const Candidate& c) {
      return !schedule::isAsynchronous(c.plan.schedule.name) && c.to_target->calibrated;
    });
    if (sync != e.ranked.end() && leader.seconds_high >= sync->to_target->seconds) {
      e.ranking_notes.push_back(
          "chose the fastest synchronous plan: " + planName(e.ranked.front().plan) + " was predicted to reach the " +
          text::format("target in %.3g s", leader.seconds) +
          text::format(" against %.3g s, ", sync->to_target->seconds) +
          text::format("but within the calibration's noise (+-%.0f%%), ", 100 * e.calibration_noise) +
          text::format("which allows up to %.3g s", leader.seconds_high));
      std::rotate(e.ranked.begin(), sync, sync + 1);
    }
  }
  // Where throughput's choice trains by the winner's rule and its prediction is within
  // the profile's noise of the winner's, the two are equals: throughput's choice stays
  // (explore() chose it among equals by its shape).
  auto kept = std::find_if(e.ranked.begin(), e.ranked.end(), isThroughputChoice);
  const TargetEstimate& winner = *e.ranked.front().to_target;
  if (kept != e.ranked.end() && kept->to_target->calibrated && kept->to_target->rule == winner.rule &&
      kept->to_target->seconds <= winner.seconds * (1 + std::max(e.noise, 1e-3)))
    std::rotate(e.ranked.begin(), kept, kept + 1);
  if (isThroughputChoice(e.ranked.front())) return;
  e.throughput_choice = *std::find_if(e.ranked.begin(), e.ranked.end(), isThroughputChoice);
}

}  // namespace pipetrain::planner
