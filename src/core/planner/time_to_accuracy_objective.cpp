// The time-to-accuracy objective (time_to_target.h): the least predicted seconds to a
// held-out loss, from each plan's throughput and its update rule's progress per sample.
#include <algorithm>
#include <cmath>

#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/objective.h"
#include "pipetrain/planner/time_to_target.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/text.h"

namespace pipetrain::planner {
namespace {

// How far calibration's estimates may be off, as a fraction, where the search prunes
// before any rule is measured: a plan is kept if it could win with its rule's most
// progress per sample and this much luck besides.
constexpr double kCalibrationNoiseAllowance = 0.25;

// JSON has no infinity (a rule that made no progress): null.
json_io::Json finite(double v) { return std::isfinite(v) ? json_io::Json(v) : json_io::Json(); }

bool calibrated(const Candidate& c) { return c.to_target && c.to_target->calibrated; }

class TimeToAccuracy : public PlanObjective {
 public:
  const char* name() const override { return "time-to-accuracy"; }
  const char* help() const override {
    return "the least predicted seconds to a held-out loss: the samples synchronous training needs for it, over each "
           "plan's throughput times its update rule's progress per sample as calibration measures it; "
           "docs/time_to_accuracy.md";
  }
  bool needsCalibrator() const override { return true; }

  // The synchronous plans compete as one family (one update rule); apart from them each
  // asynchronous schedule's pipelines and single stages, which train by other rules
  // (update_rule.h): PipeDream on one replicated stage is synchronous SGD. A schedule
  // that steps per micro-batch (PipeDream) makes a family of each micro-batch size, whose
  // steps it sets; one that steps per mini-batch applies a mini-batch's gradient however
  // it is cut, and its fastest plan stands for it. A slower plan whose rule trains more
  // per sample may reach the target first, so each family's fastest is kept.
  std::string family(const std::string& schedule, bool single_stage, int64_t microbatch_size) const override {
    if (!schedule::isAsynchronous(schedule)) return "";
    std::string name = schedule + (single_stage ? " alone" : "");
    if (schedule::traits(schedule).step_rule == schedule::StepRule::kPerMicrobatch)
      name += ", micro-batch " + std::to_string(microbatch_size);
    return name;
  }

  // Its family's best and, for an asynchronous schedule, the fastest synchronous plan's
  // over the most progress per sample any plan of it could make against that
  // (mostProgressPerSample), allowing calibration kCalibrationNoiseAllowance of noise.
  double toBeat(const std::function<double(const std::string&)>& best_of, const std::string& schedule,
                bool single_stage, int64_t microbatch_size, int64_t global_batch) const override {
    double bar = best_of(family(schedule, single_stage, microbatch_size));
    if (schedule::isAsynchronous(schedule)) {
      const int microbatches = static_cast<int>(global_batch / microbatch_size);
      bar = std::max(bar, best_of("") / (mostProgressPerSample(schedule, microbatches) * (1 + kCalibrationNoiseAllowance)));
    }
    return bar;
  }

  void rank(Exploration& e, const graph::LayerGraph& graph, const ObjectiveInputs& inputs) const override {
    if (!e.async_included) {
      // Every plan trains the same synchronous rule on the same batch: throughput ranks
      // them alike, and nothing needs calibrating.
      e.ranking_notes.push_back(
          "ranked by throughput: every plan here trains synchronously on the same mini-batch, so time to accuracy "
          "ranks them as throughput does (--allow-async adds schedules whose progress per sample differs)");
      throughputObjective().rank(e, graph, inputs);
      return;
    }
    Calibrator& calibrator = inputs.calibrator();
    const double trained_before = calibrator.trainingSeconds();
    UpdateRules book(graph);
    const Calibration& calibration = calibrateRules(e, book, calibrator, inputs.max_rules);
    e.calibration_seconds = calibrator.trainingSeconds() - trained_before;
    rankByTimeToTarget(e, book, calibration);
    e.objective = this;
  }

  std::vector<std::string> header() const override { return {"progress/sample", "s to target"}; }
  std::string caption() const override {
    return "progress/sample: the plan's update rule against synchronous training, measured in calibration; s to "
           "target: predicted seconds to the held-out loss synchronous training reached there, with the range the "
           "calibration's noise allows";
  }
  std::vector<std::string> cells(const Candidate& c) const override {
    if (!calibrated(c)) return {"not calibrated", "-"};
    const TargetEstimate& t = *c.to_target;
    if (!std::isfinite(t.seconds)) return {"0 (no progress)", "never"};
    return {text::format("%.2fx", t.efficiency), text::format("%.3g", t.seconds) + " (" +
                                                     text::format("%.3g", t.seconds_low) + "-" +
                                                     text::format("%.3g", t.seconds_high) + ")"};
  }

  // What was estimated, how sure it is, and what throughput alone would have chosen.
  void addNotes(const Exploration& e, std::vector<std::string>& notes) const override {
    notes.push_back(text::format("ranked by predicted time to a held-out loss of %.4g: what synchronous training "
                                 "reached ",
                                 e.target_loss) +
                    "after " + std::to_string(e.calibration_samples) +
                    " samples of calibration, which trained each plan's update rule from the same start "
                    "(early training: it predicts the time to that loss, not the final accuracy)");
    notes.push_back(text::format("each rule's progress per sample is known within +-%.0f%%: ", 100 * e.calibration_noise) +
                    "how far synchronous training on another data order landed from itself");
    const auto uncalibrated = std::count_if(e.ranked.begin(), e.ranked.end(), [](const Candidate& c) { return !calibrated(c); });
    notes.push_back("update rules: " + std::to_string(e.rules_measured) + " trained in calibration, " +
                    std::to_string(e.rules_cached) + " from its cache; " + std::to_string(e.plans_bounded) +
                    " asynchronous plans not considered, as even perfect scaling to their smaller steps would not win" +
                    (e.rules_over_budget > 0 ? ", " + std::to_string(e.rules_over_budget) +
                                                   " not trained for the limit on the rules calibration trains"
                                             : std::string()));
    if (uncalibrated > 0)
      notes.push_back(std::to_string(uncalibrated) + " plans have no estimate (their rules were not trained); they "
                      "are listed after the others, by throughput");
    if (!e.throughput_choice) return;
    const Candidate& t = *e.throughput_choice;
    notes.push_back("throughput alone would choose " + planName(t.plan) + ", micro-batch " +
                    std::to_string(t.plan.microbatch_size) + " x " + std::to_string(t.plan.microbatches) +
                    text::format(", %.6g samples/s", t.report.throughput) +
                    (!calibrated(t) ? std::string(" (no estimate: by the bound it could not win)")
                     : std::isfinite(t.to_target->seconds)
                         ? text::format(", predicted %.3g s to the target", t.to_target->seconds)
                         : std::string(", which made no progress in calibration")));
  }

  std::string chosenClause(const Candidate& best) const override {
    return calibrated(best) ? text::format(", %.3g s to the target", best.to_target->seconds) : "";
  }

  void addJson(const Exploration& e, json_io::Json& j) const override {
    j.update(e.calibrationFigures().toJson());
    if (e.throughput_choice) j["throughput_choice"] = e.candidateJson(*e.throughput_choice);
  }

  void addCandidateJson(const Candidate& c, json_io::Json& j) const override {
    if (!c.to_target) return;
    const TargetEstimate& t = *c.to_target;
    j["to_target"] = {{"rule", t.rule}, {"calibrated", t.calibrated}};
    if (t.calibrated)
      j["to_target"].update({{"reached", t.reached},
                             {"efficiency", t.efficiency},
                             {"seconds", finite(t.seconds)},
                             {"seconds_low", finite(t.seconds_low)},
                             {"seconds_high", finite(t.seconds_high)}});
  }
};

}  // namespace

const PlanObjective& timeToAccuracyObjective() {
  static const TimeToAccuracy objective;
  return objective;
}

}  // namespace pipetrain::planner
