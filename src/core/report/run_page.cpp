#include "pipetrain/report/run_page.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pipetrain/planner/explore.h"
#include "pipetrain/report/pages.h"
#include "pipetrain/report/run_headline.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/text.h"

namespace pipetrain::report {
namespace {

using json_io::Json;
using json_io::JsonCursor;

double orNan(const std::optional<int64_t>& v) { return v ? static_cast<double>(*v) : NAN; }

// Each rank's shares of its step, as the run measured them, with the simulator's
// prediction from this run's action times (the summary's predicted Gantt chart, whose
// idle time holds the all-reduce) beside them.
std::vector<RankShares> rankShares(const TrainSummary& s) {
  const trace::Timeline& predicted = s.predicted_timeline;
  std::vector<RankShares> out;
  for (const RankSummary& r : s.ranks) {
    RankShares& shares = out.emplace_back();
    shares.rank = r.rank;
    shares.compute = 1 - r.bubble_fraction;
    shares.allreduce = r.allreduce_fraction;
    shares.messages = r.wait_fraction;
    shares.framework = r.overhead_fraction;
    if (r.core_wait_fraction >= 0) shares.core_wait = r.core_wait_fraction;
    shares.schedule_idle = r.predicted_bubble_fraction;
    if (shares.rank < predicted.numRanks() && predicted.makespan() > 0) {
      double allreduce = 0;
      for (const trace::TimedAction& a : predicted.ranks[static_cast<std::size_t>(shares.rank)])
        if (a.action.type == schedule::ActionType::ALLREDUCE) allreduce += a.end - a.start;
      shares.predicted_allreduce = allreduce / predicted.makespan();
      shares.schedule_idle = std::max(0.0, shares.schedule_idle - shares.predicted_allreduce);
    }
  }
  return out;
}

// A restart, or the job going on with fewer ranks, as the report says it.
std::string eventNote(const RunEvent& e) {
  return text::format("At %.1f s", e.seconds) + ": " +
         (e.event == "shrink" ? "a rank was lost for good; the job went on with " + std::to_string(e.ranks) +
                                    " ranks, re-planned for them,"
                              : std::string("the job restarted")) +
         (e.checkpoint.empty() ? " from the start" : " from checkpoint " + e.checkpoint) + " (" +
         e.why.substr(0, e.why.find('\n')) + ").";
}

std::vector<BarChart> measuredRankBars(const TrainSummary& s) {
  BarChart idle{"idle", "Where each rank's step went, besides compute (share of the step)", Unit::kFraction,
                rankNames(s.ranks.size()), {}};
  BarChart memory{"memory", "Memory per rank", Unit::kBytes, idle.categories, {}};
  BarChart::Series bubble{"idle, measured", {}}, bubble_predicted{"idle, predicted from this run", {}},
      allreduce{"all-reduce", {}}, wait{"waiting for messages", {}}, framework{"framework", {}},
      core_wait{"waiting for a CPU core (within the others)", {}};
  BarChart::Series peak{"peak added by training, measured", {}},
      peak_predicted{"peak, predicted by the planner from the profile", {}}, weights{"weight copies", {}};
  for (const RankSummary& r : s.ranks) {
    bubble.values.push_back(r.bubble_fraction);
    bubble_predicted.values.push_back(r.predicted_bubble_fraction);
    allreduce.values.push_back(r.allreduce_fraction);
    wait.values.push_back(r.wait_fraction);
    framework.values.push_back(r.overhead_fraction);
    core_wait.values.push_back(r.core_wait_fraction >= 0 ? r.core_wait_fraction : NAN);
    peak.values.push_back(r.memoryAddedByTraining());
    peak_predicted.values.push_back(orNan(r.predicted_peak_memory_bytes));
    weights.values.push_back(static_cast<double>(r.weight_bytes));
  }
  idle.series = {bubble, bubble_predicted};
  if (std::any_of(allreduce.values.begin(), allreduce.values.end(), [](double v) { return v > 0; }))
    idle.series.push_back(allreduce);
  idle.series.insert(idle.series.end(), {wait, framework, core_wait});
  memory.series = {peak};
  if (std::any_of(peak_predicted.values.begin(), peak_predicted.values.end(), [](double v) { return std::isfinite(v); }))
    memory.series.push_back(peak_predicted);
  memory.series.push_back(weights);
  return {idle, memory};
}

// The training loss of every mini-batch and the evaluations, from the metrics log, or
// the evaluations the summary keeps where there is no log.
std::vector<LineChart> lossCharts(const TrainSummary& s, const std::vector<Json>& metrics, const std::string& origin) {
  LineChart loss{"loss", "Training loss", "seconds since training began", "loss", INFINITY, {}};
  LineChart accuracy{"accuracy", "Test accuracy", "seconds since training began", "accuracy", 1.0, {}};
  LineChart::Series train_loss{"training loss (each mini-batch)", {}, false}, test_loss{"test loss", {}, true},
      test_accuracy{"test accuracy", {}, true};
  auto addEvaluation = [&](double t, double loss_value, double accuracy_value) {
    if (loss_value >= 0) test_loss.points.push_back({t, loss_value});
    if (accuracy_value >= 0) test_accuracy.points.push_back({t, accuracy_value});
  };
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    const JsonCursor m(metrics[i], origin + " metrics", "line " + std::to_string(i + 1));
    const std::string event = m.field("event").asString();
    if (event == "step") train_loss.points.push_back({m.field("wall_seconds").asNumber(), m.field("loss").asNumber()});
    if (event == "eval")
      addEvaluation(m.field("wall_seconds").asNumber(), m.field("test_loss").asNumber(),
                    m.field("test_accuracy").asNumber());
  }
  if (metrics.empty())
    for (const Evaluation& e : s.history) addEvaluation(e.wall_seconds, e.test_loss, e.test_accuracy);
  loss.series = {train_loss, test_loss};
  accuracy.series = {test_accuracy};
  std::vector<LineChart> out;
  if (!train_loss.points.empty() || !test_loss.points.empty()) out.push_back(loss);
  if (!test_accuracy.points.empty()) out.push_back(accuracy);
  return out;
}

}  // namespace

std::string rankSummaryLine(const RankSummary& r) {
  const std::string core =
      r.core_wait_fraction >= 0 ? text::format(", waited for a core %.1f%%", 100 * r.core_wait_fraction) : "";
  // On a GPU, the caching allocator's peak beside the process's resident set, and what
  // the planner predicted of it: its tensors, the prediction less the process's own bytes.
  const double device_peak = static_cast<double>(r.peak_device_memory_bytes);
  std::string device_predicted;
  if (device_peak >= 0 && r.predicted_peak_memory_bytes) {
    const double tensors =
        static_cast<double>(*r.predicted_peak_memory_bytes - r.predicted_process_bytes.value_or(0));
    device_predicted = " (predicted " + text::humanBytes(tensors) +
                       (device_peak > 0 ? text::format(", %+.0f%%", 100 * (tensors / device_peak - 1)) : "") + ")";
  }
  const std::string device = r.device + " over " + r.data_channel +
                             (device_peak >= 0 ? ", peak GPU memory " + text::humanBytes(device_peak) + device_predicted
                                               : "");
  const std::string allreduce_text =
      r.allreduce_fraction > 0 ? text::format("all-reduce %.1f%%, ", 100 * r.allreduce_fraction) : "";
  const std::string memory =
      text::humanBytes(static_cast<double>(r.peak_memory_bytes)) + " (training added " +
      text::humanBytes(r.memoryAddedByTraining()) +
      (r.predicted_peak_memory_bytes
           ? ", predicted " + text::humanBytes(static_cast<double>(*r.predicted_peak_memory_bytes)) + ")"
           : ")");
  char line[1024];
  std::snprintf(line, sizeof line,
                "rank %d on %s: bubble %.1f%% (predicted %.1f%%; %swaiting for messages %.1f%%, framework %.1f%%)%s, "
                "weights %s in %d version(s) (predicted %d), peak host memory %s",
                r.rank, device.c_str(), 100 * r.bubble_fraction, 100 * r.predicted_bubble_fraction,
                allreduce_text.c_str(), 100 * r.wait_fraction, 100 * r.overhead_fraction, core.c_str(),
                text::humanBytes(static_cast<double>(r.weight_bytes)).c_str(), r.weight_versions,
                r.predicted_weight_versions, memory.c_str());
  return line;
}

std::vector<std::string> memoryNotesOfRun(const TrainSummary& s, bool brief) {
  std::vector<RankMemory> ranks;
  const int learned = s.planner ? s.planner->chosen.process_memory_runs : 0;
  for (const RankSummary& r : s.ranks) {
    RankMemory& m = ranks.emplace_back();
    m.rank = r.rank;
    m.measured = r.memoryAddedByTraining();
    m.predicted = orNan(r.predicted_peak_memory_bytes);
    m.predicted_process = static_cast<double>(r.predicted_process_bytes.value_or(0));
    m.data = static_cast<double>(r.data_memory_bytes);
    m.learned_from_runs = learned;
    m.heap_free = static_cast<double>(r.heap_free_bytes);
    // On a GPU the planner prices the device's memory, which the resident set does not hold.
    if (r.peak_device_memory_bytes >= 0) m.predicted = NAN;
  }
  return memoryNotes(ranks, brief);
}

std::vector<std::string> coreSpeedNotesOfRun(const TrainSummary& s) {
  if (!s.planner) return {};
  std::vector<double> rank_probes;
  for (const RankSummary& r : s.ranks) rank_probes.push_back(r.probe_seconds);
  return coreSpeedNotes(s.planner->chosen.probe_seconds, rank_probes, s.planner->chosen.throughput);
}

Page pageForRun(const TrainSummary& s, const std::vector<Json>& metrics, const std::string& origin) {
  const bool data_parallel = planner::isDataParallel(s.plan);
  Page page;
  page.title = s.model + " with " + (data_parallel ? "data parallelism" : s.schedule) + " on " +
               std::to_string(s.world_size) + (s.world_size == 1 ? " rank" : " ranks");
  const double planned = s.planner ? s.planner->chosen.throughput : NAN;
  // A data-parallel run has no pipeline schedule; its plan's name only orders each
  // replica's passes, and calling the run "1f1b" misled users.
  page.facts = {{"model", s.model},
                {"schedule", data_parallel ? "data parallelism (" + s.schedule + "'s order of passes)" : s.schedule},
                {"ranks", std::to_string(s.world_size)},
                {"samples trained", std::to_string(s.samples)},
                {"throughput, measured", text::format("%.1f samples/s", s.throughput)}};
  if (std::isfinite(planned))
    page.facts.push_back({"predicted by the planner", text::format("%.1f samples/s, from the profile", planned)});
  page.facts.push_back({"predicted from this run", text::format("%.1f samples/s", s.predicted_throughput) +
                                                        ": the simulator fed this run's measured time of each action"});
  page.facts.push_back({"wall time", text::format("%.1f s", s.wall_seconds)});
  page.facts.push_back({"final training loss", text::format("%.4f", s.final_loss)});
  if (s.test_accuracy) page.facts.push_back({"test accuracy", text::format("%.4f", *s.test_accuracy)});
  if (s.test_loss) page.facts.push_back({"test loss", text::format("%.4f", *s.test_loss)});
  for (const std::string& note : runHeadline(rankShares(s), s.throughput, s.predicted_throughput, planned))
    page.notes.push_back(note);
  for (const std::string& note : memoryNotesOfRun(s)) page.notes.push_back(note);
  for (const std::string& note : coreSpeedNotesOfRun(s)) page.notes.push_back(note);
  for (const RunEvent& e : s.events) page.notes.push_back(eventNote(e));
  if (s.asynchronous)
    page.notes.push_back("This plan of " + s.schedule +
                         " trains asynchronously: its updates use stale weights, so it is not synchronous SGD.");

  page.tables.push_back(planStagesTable(s.plan));
  if (s.planner) {
    page.facts.push_back({"before training", beforeTrainingText(*s.planner)});
    page.tables.push_back(s.planner->candidates);
    for (const std::string& note : s.planner->notes) page.notes.push_back(note);
  }
  for (const trace::Timeline* t : {&s.predicted_timeline, &s.measured_timeline})
    if (t->numRanks() > 0) page.timelines.push_back(*t);
  page.bars = measuredRankBars(s);
  page.lines = lossCharts(s, metrics, origin);
  return page;
}

std::string beforeTrainingText(const PlannerRecord& planner) {
  const ProfileSource& profile = planner.profile;
  std::string text = text::format("profiling %.1f s", profile.seconds);
  if (profile.cached)
    text += text::format(" (from the profile cache; measuring it took %.1f s on ", profile.measured_seconds) +
            (profile.measured.empty() ? "?" : profile.measured) + ")";
  text += text::format(", planning %.2f s", planner.planning_seconds);
  if (const std::optional<CalibrationRecord>& c = planner.calibration)
    text += text::format(", calibrating update rules %.1f s", c->seconds) +
            " (" + std::to_string(c->figures.rules_measured) + " trained, " + std::to_string(c->figures.rules_cached) +
            " from the cache)";
  return text;
}

}  // namespace pipetrain::report
