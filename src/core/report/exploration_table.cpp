#include "pipetrain/report/exploration_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/text.h"

namespace pipetrain::report {

std::string planName(const plan::Plan& plan) {
  const std::string recomputed = plan::recomputedStages(plan);
  const auto count =
      std::count_if(plan.stages.begin(), plan.stages.end(), [](const plan::Stage& s) { return s.recompute; });
  const std::string recomputing = recomputed.empty()    ? ""
                                  : recomputed == "all" ? ", recomputing activations"
                                                        : (count == 1 ? ", stage " : ", stages ") + recomputed +
                                                              " recomputing activations";
  if (planner::isDataParallel(plan))
    return "data parallelism on " + std::to_string(plan.stages[0].devices.size()) + " devices (" +
           plan.schedule.name + "'s order of passes" + recomputing + ")";
  return plan.schedule.name + ", " + std::to_string(plan.numStages()) + " stages (" + plan::stageShape(plan) + ")" +
         recomputing;
}

namespace {

// The time-to-accuracy columns of a candidate: its rule's progress per sample and its
// predicted seconds to the target.
std::pair<std::string, std::string> targetCells(const planner::Candidate& c) {
  if (!c.to_target || !c.to_target->calibrated) return {"not calibrated", "-"};
  const planner::TargetEstimate& t = *c.to_target;
  if (!std::isfinite(t.seconds)) return {"0 (no progress)", "never"};
  return {text::format("%.2fx", t.efficiency),
          text::format("%.3g", t.seconds) + " (" + text::format("%.3g", t.seconds_low) + "-" +
              text::format("%.3g", t.seconds_high) + ")"};
}

// The sentences on the time-to-accuracy ranking: what was estimated, how sure it is,
// and what throughput alone would have chosen.
void addTargetNotes(const planner::Exploration& e, std::vector<std::string>& notes) {
  notes.push_back(text::format("ranked by predicted time to a held-out loss of %.4g: what synchronous training reached ",
                               e.target_loss) +
                  "after " + std::to_string(e.calibration_samples) +
                  " samples of calibration, which trained each plan's update rule from the same start "
                  "(early training: it predicts the time to that loss, not the final accuracy)");
  notes.push_back(text::format("each rule's progress per sample is known within +-%.0f%%: ", 100 * e.calibration_noise) +
                  "how far synchronous training on another data order landed from itself");
  const int uncalibrated = static_cast<int>(std::count_if(e.ranked.begin(), e.ranked.end(), [](const planner::Candidate& c) {
    return !c.to_target || !c.to_target->calibrated;
  }));
  notes.push_back("update rules: " + std::to_string(e.rules_measured) + " trained in calibration, " +
                  std::to_string(e.rules_cached) + " from its cache; " + std::to_string(e.plans_bounded) +
                  " asynchronous plans not considered, as even perfect scaling to their smaller steps would not win" +
                  (e.rules_over_budget > 0 ? ", " + std::to_string(e.rules_over_budget) +
                                                 " not trained for the limit on the rules calibration trains"
                                           : std::string()));
  if (uncalibrated > 0)
    notes.push_back(std::to_string(uncalibrated) + " plans have no estimate (their rules were not trained); they are "
                    "listed after the others, by throughput");
  if (e.throughput_choice) {
    const planner::Candidate& t = *e.throughput_choice;
    const bool timed = t.to_target && t.to_target->calibrated;
    notes.push_back("throughput alone would choose " + planName(t.plan) + ", micro-batch " +
                    std::to_string(t.plan.microbatch_size) + " x " + std::to_string(t.plan.microbatches) +
                    text::format(", %.6g samples/s", t.report.throughput) +
                    (!timed ? std::string(" (no estimate: by the bound it could not win)")
                     : std::isfinite(t.to_target->seconds)
                         ? text::format(", predicted %.3g s to the target", t.to_target->seconds)
                         : std::string(", which made no progress in calibration")));
  }
}

}  // namespace

Table explorationTable(const planner::Exploration& e, int top) {
  Table t;
  t.caption = "The planner's ranking (predicted, steady state). by: what proposed the plan (chain: PipeDream's "
              "partitioner over the layers in order; graph: GraphPipe's, branches as parallel stages; balanced: "
              "equal stages for a schedule that places several on a device; refined: a simulated neighbour of "
              "one of those)";
  // The longest path of stages is their number but where branches run side by side.
  bool branches = false;
  bool recomputing = false;
  for (const auto& c : e.ranked) {
    branches = branches || c.depth != c.plan.numStages();
    recomputing = recomputing || !plan::recomputedStages(c.plan).empty();
  }
  t.header = {"#", "schedule", "by", "stages"};
  if (branches) t.header.push_back("depth");
  if (recomputing) {
    t.header.push_back("recompute");
    t.caption += ". recompute: the stages that run their forward pass again before the backward pass, to fit memory";
  }
  for (const char* h : {"stages x repl", "mb", "m", "samples/s", "iter ms", "bubble", "peak mem"}) t.header.push_back(h);
  const bool to_target = e.objective == planner::Objective::kTimeToAccuracy;
  if (to_target) {
    t.caption += ". progress/sample: the plan's update rule against synchronous training, measured in calibration; "
                 "s to target: predicted seconds to the held-out loss synchronous training reached there, with the "
                 "range the calibration's noise allows";
    t.header.push_back("progress/sample");
    t.header.push_back("s to target");
  }
  t.highlighted_row = 0;
  // Synchronous data parallelism is listed once, at its best (planner::sameDataParallelRun).
  std::vector<const plan::Plan*> listed;
  for (const auto& c : e.ranked) {
    if (static_cast<int>(t.rows.size()) >= top) break;
    if (std::any_of(listed.begin(), listed.end(),
                    [&](const plan::Plan* p) { return planner::sameDataParallelRun(*p, c.plan); }))
      continue;
    listed.push_back(&c.plan);
    std::string schedule = c.plan.schedule.name;
    if (planner::isDataParallel(c.plan))
      schedule = "data parallel";
    else if (schedule::isAsynchronous(schedule))
      schedule += "*";
    std::vector<std::string> row{std::to_string(t.rows.size() + 1), schedule, c.partitioner,
                                 std::to_string(c.plan.numStages())};
    if (branches) row.push_back(std::to_string(c.depth));
    if (recomputing) {
      const std::string stages = plan::recomputedStages(c.plan);
      row.push_back(stages.empty() ? "-" : stages);
    }
    for (std::string cell : {plan::stageShape(c.plan), std::to_string(c.plan.microbatch_size),
                             std::to_string(c.plan.microbatches), text::format("%.6g", c.report.throughput),
                             text::format("%.4g", c.report.iteration_time * 1e3),
                             text::format("%.1f%%", 100 * c.report.bubble_fraction),
                             text::humanBytes(static_cast<double>(c.report.peakMemoryBytes()))})
      row.push_back(std::move(cell));
    if (to_target) {
      const std::pair<std::string, std::string> cells = targetCells(c);
      row.push_back(cells.first);
      row.push_back(cells.second);
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::vector<std::string> explorationNotes(const planner::Exploration& e) {
  std::vector<std::string> notes;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%zu candidates ranked, %d proposals and %d combinations pruned by their bounds, %zu "
                "combinations dropped, searched in %.3f s",
                e.ranked.size(), e.pruned, e.pruned_combinations, e.dropped.size(), e.search_seconds);
  notes.push_back(buf);
  notes.push_back(e.async_included
                      ? "* asynchronous: trains with stale weights, not synchronous SGD"
                      : "asynchronous schedules (pipedream, 2bw, pipemare) not considered; --allow-async adds them");
  // Why throughput ranked as it did; under time to accuracy addTargetNotes says why.
  if (e.objective == planner::Objective::kThroughput) {
    if (const std::string note = e.noiseNote(); !note.empty()) notes.push_back(note);
    if (const std::string lost = e.runnerUpLost(); !lost.empty()) notes.push_back("runner-up lost: " + lost);
  }
  if (const std::string note = e.idleDevicesNote(); !note.empty()) notes.push_back("warning: " + note);
  for (const std::string& note : e.graph_notes) notes.push_back("graph partitioner: " + note);
  if (e.objective == planner::Objective::kTimeToAccuracy) addTargetNotes(e, notes);
  const auto& best = e.best();
  std::snprintf(buf, sizeof buf, "chosen: %s, micro-batch %lld x %d, predicted %.6g samples/s",
                planName(best.plan).c_str(), static_cast<long long>(best.plan.microbatch_size),
                best.plan.microbatches, best.report.throughput);
  std::string chosen = buf;
  if (best.to_target && best.to_target->calibrated)
    chosen += text::format(", %.3g s to the target", best.to_target->seconds);
  notes.push_back(chosen);
  return notes;
}

}  // namespace pipetrain::report
