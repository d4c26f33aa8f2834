#include "pipetrain/report/pages.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>

#include "pipetrain/report/exploration_table.h"
#include "pipetrain/report/run_headline.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/trace/timeline_json.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::report {
namespace {

using json_io::Json;
using json_io::JsonCursor;

std::vector<std::string> rankNames(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t r = 0; r < n; ++r) out.push_back("rank " + std::to_string(r));
  return out;
}

std::string layerSpan(const std::vector<std::string>& layers) {
  if (layers.size() == 1) return layers.front();
  return layers.front() + " .. " + layers.back() + " (" + std::to_string(layers.size()) + " layers)";
}

double numberOr(const JsonCursor& c, const std::string& key) { return c.has(key) ? c.field(key).asNumber() : NAN; }

// Each rank's shares of its step, as the run measured them, with the simulator's
// prediction from this run's action times (the summary's predicted Gantt chart, whose
// idle time holds the all-reduce) beside them.
std::vector<RankShares> rankShares(const JsonCursor& s, const std::string& origin) {
  std::optional<trace::Timeline> predicted;
  if (s.has("predicted_timeline")) predicted = trace::timelineFromJson(s.field("predicted_timeline").node(), origin);
  std::vector<RankShares> out;
  for (const auto& r : s.field("ranks").asArray()) {
    RankShares& shares = out.emplace_back();
    shares.rank = static_cast<int>(r.field("rank").asInt());
    shares.compute = 1 - r.field("bubble_fraction").asNumber();
    shares.allreduce = r.has("allreduce_fraction") ? r.field("allreduce_fraction").asNumber() : 0.0;
    shares.messages = numberOr(r, "wait_fraction");
    shares.framework = numberOr(r, "overhead_fraction");
    if (const double c = numberOr(r, "core_wait_fraction"); c >= 0) shares.core_wait = c;
    shares.schedule_idle = numberOr(r, "predicted_bubble_fraction");
    if (predicted && shares.rank < predicted->numRanks() && predicted->makespan() > 0) {
      double allreduce = 0;
      for (const trace::TimedAction& a : predicted->ranks[static_cast<std::size_t>(shares.rank)])
        if (a.action.type == schedule::ActionType::ALLREDUCE) allreduce += a.end - a.start;
      shares.predicted_allreduce = allreduce / predicted->makespan();
      shares.schedule_idle = std::max(0.0, shares.schedule_idle - shares.predicted_allreduce);
    }
  }
  return out;
}

}  // namespace

double memoryAddedByTraining(const JsonCursor& rank) {
  return rank.field("peak_memory_bytes").asNumber() -
         (rank.has("start_memory_bytes") ? rank.field("start_memory_bytes").asNumber() : 0.0);
}

std::string rankSummaryLine(const Json& r) {
  const double core_wait = r["core_wait_fraction"];
  const std::string core = core_wait >= 0 ? text::format(", waited for a core %.1f%%", 100 * core_wait) : "";
  // On a GPU, the caching allocator's peak beside the process's resident set, and what
  // the planner predicted of it: its tensors, the prediction less the process's own bytes.
  const double device_peak = r["peak_device_memory_bytes"];
  std::string device_predicted;
  if (device_peak >= 0 && r.contains("predicted_peak_memory_bytes")) {
    const double tensors =
        r["predicted_peak_memory_bytes"].get<double>() - r.value("predicted_process_bytes", 0.0);
    device_predicted = " (predicted " + text::humanBytes(tensors) +
                       (device_peak > 0 ? text::format(", %+.0f%%", 100 * (tensors / device_peak - 1)) : "") + ")";
  }
  const std::string device = r["device"].get<std::string>() + " over " + r["data_channel"].get<std::string>() +
                             (device_peak >= 0 ? ", peak GPU memory " + text::humanBytes(device_peak) + device_predicted
                                               : "");
  const double allreduce = r["allreduce_fraction"];
  const std::string allreduce_text = allreduce > 0 ? text::format("all-reduce %.1f%%, ", 100 * allreduce) : "";
  const std::string memory =
      text::humanBytes(r["peak_memory_bytes"].get<double>()) + " (training added " +
      text::humanBytes(memoryAddedByTraining(JsonCursor(r, "rank"))) +
      (r.contains("predicted_peak_memory_bytes")
           ? ", predicted " + text::humanBytes(r["predicted_peak_memory_bytes"].get<double>()) + ")"
           : ")");
  char line[1024];
  std::snprintf(line, sizeof line,
                "rank %d on %s: bubble %.1f%% (predicted %.1f%%; %swaiting for messages %.1f%%, framework %.1f%%)%s, "
                "weights %s in %d version(s) (predicted %d), peak host memory %s",
                r["rank"].get<int>(), device.c_str(), 100 * r["bubble_fraction"].get<double>(),
                100 * r["predicted_bubble_fraction"].get<double>(), allreduce_text.c_str(),
                100 * r["wait_fraction"].get<double>(), 100 * r["overhead_fraction"].get<double>(), core.c_str(),
                text::humanBytes(r["weight_bytes"].get<double>()).c_str(), r["weight_versions"].get<int>(),
                r["predicted_weight_versions"].get<int>(), memory.c_str());
  return line;
}

std::vector<std::string> memoryNotesOfRun(const Json& summary, const std::string& origin, bool brief) {
  std::vector<RankMemory> ranks;
  const JsonCursor s(summary, origin);
  const int learned = s.has("planner") && s.field("planner").has("chosen")
                          ? static_cast<int>(s.field("planner").field("chosen").numberOr("process_memory_runs", 0))
                          : 0;
  for (const auto& r : s.field("ranks").asArray()) {
    RankMemory& m = ranks.emplace_back();
    m.rank = static_cast<int>(r.field("rank").asInt());
    m.measured = memoryAddedByTraining(r);
    m.predicted = numberOr(r, "predicted_peak_memory_bytes");
    m.predicted_process = r.has("predicted_process_bytes") ? r.field("predicted_process_bytes").asNumber() : 0.0;
    m.data = r.has("data_memory_bytes") ? r.field("data_memory_bytes").asNumber() : -1.0;
    m.learned_from_runs = learned;
    m.heap_free = r.has("heap_free_bytes") ? r.field("heap_free_bytes").asNumber() : -1.0;
    // On a GPU the planner prices the device's memory, which the resident set does not hold.
    if (r.has("peak_device_memory_bytes") && r.field("peak_device_memory_bytes").asNumber() >= 0) m.predicted = NAN;
  }
  return memoryNotes(ranks, brief);
}

std::vector<std::string> coreSpeedNotesOfRun(const Json& summary, const std::string& origin) {
  const JsonCursor s(summary, origin);
  if (!s.has("planner") || !s.field("planner").has("chosen")) return {};
  const JsonCursor chosen = s.field("planner").field("chosen");
  std::vector<double> rank_probes;
  for (const auto& r : s.field("ranks").asArray()) rank_probes.push_back(r.numberOr("probe_seconds", 0));
  return coreSpeedNotes(chosen.numberOr("probe_seconds", 0), rank_probes, chosen.numberOr("throughput", 0));
}

Table planStagesTable(const plan::Plan& plan) {
  Table t;
  t.caption = planner::planName(plan) + ", micro-batch " + std::to_string(plan.microbatch_size) + " x " +
              std::to_string(plan.microbatches);
  t.header = {"stage", "layers", "replicas", "devices"};
  for (int s = 0; s < plan.numStages(); ++s) {
    std::string devices;
    for (const auto& d : plan.stages[s].devices) devices += (devices.empty() ? "" : ", ") + d;
    t.rows.push_back({std::to_string(s), layerSpan(plan.stages[s].layers),
                      std::to_string(plan.stages[s].devices.size()), devices});
  }
  return t;
}

std::vector<BarChart> predictedRankBars(const sim::Report& r) {
  BarChart idle{"idle", "Idle share of each rank's step (predicted)", Unit::kFraction, rankNames(r.ranks.size()), {}};
  BarChart memory{"memory", "Peak memory per rank (predicted)", Unit::kBytes, idle.categories, {}};
  BarChart::Series bubble{"bubble", {}}, peak{"peak memory", {}}, capacity{"device memory", {}};
  for (const auto& rank : r.ranks) {
    bubble.values.push_back(rank.bubble_fraction);
    peak.values.push_back(static_cast<double>(rank.peak_memory_bytes));
    capacity.values.push_back(static_cast<double>(rank.memory_capacity_bytes));
  }
  idle.series = {bubble};
  memory.series = {peak, capacity};
  return {idle, memory};
}

Page pageForExploration(const planner::Exploration& e, const graph::LayerGraph& graph,
                                const cluster::ClusterSpec& cluster, const std::string& title) {
  const auto& best = e.best();
  Page page;
  page.title = title;
  page.facts = {{"chosen", planner::planName(best.plan)},
                {"predicted throughput", text::format("%.6g samples/s", best.report.throughput)},
                {"iteration", text::format("%.4g ms", 1e3 * best.report.iteration_time)},
                {"mean bubble", text::format("%.1f%%", 100 * best.report.bubble_fraction)},
                {"peak memory", text::humanBytes(static_cast<double>(best.report.peakMemoryBytes()))}};
  page.notes = explorationNotes(e);
  page.tables = {planStagesTable(best.plan), explorationTable(e, 20)};
  page.timelines = {sim::evaluatePlan(graph, cluster, best.plan).timeline};
  page.bars = predictedRankBars(best.report);
  return page;
}

Page pageForSimulation(const sim::Evaluation& e, const plan::Plan& plan, const std::string& title) {
  Page page;
  page.title = title;
  page.facts = {{"schedule", e.report.schedule},
                {"stages", std::to_string(e.report.stages)},
                {"micro-batches", std::to_string(e.report.microbatches)},
                {"predicted throughput", text::format("%.6g samples/s", e.report.throughput)},
                {"iteration", text::format("%.4g ms", 1e3 * e.report.iteration_time)},
                {"mean bubble", text::format("%.1f%%", 100 * e.report.bubble_fraction)}};
  page.tables = {planStagesTable(plan)};
  page.timelines = {e.timeline};
  page.bars = predictedRankBars(e.report);
  return page;
}

Page pageForRun(const Json& summary, const std::vector<Json>& metrics, const std::string& origin) {
  const JsonCursor s(summary, origin);
  const std::string model = s.field("model").asString(), schedule = s.field("schedule").asString();
  const int64_t world = s.field("world_size").asInt();
  Page page;
  const plan::Plan plan = plan::Plan::fromJson(s.field("plan").node(), origin + ": plan");
  page.title = model + " with " + (planner::isDataParallel(plan) ? "data parallelism" : schedule) + " on " +
               std::to_string(world) + (world == 1 ? " rank" : " ranks");
  const double measured = s.field("throughput").asNumber(), predicted = s.field("predicted_throughput").asNumber();
  const double planned = s.has("planner") && s.field("planner").has("chosen")
                             ? s.field("planner").field("chosen").numberOr("throughput", NAN)
                             : NAN;
  // A data-parallel run has no pipeline schedule; its plan's name only orders each
  // replica's passes, and calling the run "1f1b" misled users.
  page.facts = {{"model", model},
                {"schedule", planner::isDataParallel(plan) ? "data parallelism (" + schedule + "'s order of passes)"
                                                           : schedule},
                {"ranks", std::to_string(world)},
                {"samples trained", std::to_string(s.field("samples").asInt())},
                {"throughput, measured", text::format("%.1f samples/s", measured)}};
  if (std::isfinite(planned))
    page.facts.push_back({"predicted by the planner", text::format("%.1f samples/s, from the profile", planned)});
  page.facts.push_back({"predicted from this run", text::format("%.1f samples/s", predicted) +
                                                        ": the simulator fed this run's measured time of each action"});
  page.facts.push_back({"wall time", text::format("%.1f s", s.field("wall_seconds").asNumber())});
  page.facts.push_back({"final training loss", text::format("%.4f", s.field("final_loss").asNumber())});
  if (s.has("test_accuracy")) page.facts.push_back({"test accuracy", text::format("%.4f", s.field("test_accuracy").asNumber())});
  if (s.has("test_loss")) page.facts.push_back({"test loss", text::format("%.4f", s.field("test_loss").asNumber())});
  for (const std::string& note : runHeadline(rankShares(s, origin), measured, predicted, planned))
    page.notes.push_back(note);
  for (const std::string& note : memoryNotesOfRun(summary, origin)) page.notes.push_back(note);
  for (const std::string& note : coreSpeedNotesOfRun(summary, origin)) page.notes.push_back(note);
  if (s.has("events"))  // restarts, and the job going on with fewer ranks
    for (const JsonCursor& e : s.field("events").asArray()) {
      const std::string checkpoint = e.field("checkpoint").asString();
      const std::string why = e.field("why").asString();
      page.notes.push_back(text::format("At %.1f s", e.field("seconds").asNumber()) + ": " +
                           (e.field("event").asString() == "shrink"
                                ? "a rank was lost for good; the job went on with " +
                                      std::to_string(e.field("ranks").asInt()) + " ranks, re-planned for them,"
                                : std::string("the job restarted")) +
                           (checkpoint.empty() ? " from the start" : " from checkpoint " + checkpoint) + " (" +
                           why.substr(0, why.find('\n')) + ").");
    }
  if (s.boolOr("asynchronous", false))
    page.notes.push_back("This plan of " + schedule +
                         " trains asynchronously: its updates use stale weights, so it is not synchronous SGD.");

  page.tables.push_back(planStagesTable(plan));
  if (s.has("planner")) {
    if (const std::string before = beforeTrainingText(s.field("planner")); !before.empty())
      page.facts.push_back({"before training", before});
    page.tables.push_back(tableFromJson(s.field("planner").node(), origin + ": planner"));
    if (s.field("planner").has("notes"))
      for (const auto& note : s.field("planner").field("notes").asStringArray()) page.notes.push_back(note);
  }
  if (s.has("predicted_timeline"))
    page.timelines.push_back(trace::timelineFromJson(s.field("predicted_timeline").node(), origin));
  if (s.has("measured_timeline"))
    page.timelines.push_back(trace::timelineFromJson(s.field("measured_timeline").node(), origin));

  const auto ranks = s.field("ranks").asArray();
  BarChart idle{"idle", "Where each rank's step went, besides compute (share of the step)", Unit::kFraction,
                rankNames(ranks.size()), {}};
  BarChart memory{"memory", "Memory per rank", Unit::kBytes, idle.categories, {}};
  BarChart::Series bubble{"idle, measured", {}}, bubble_predicted{"idle, predicted from this run", {}},
      allreduce{"all-reduce", {}}, wait{"waiting for messages", {}}, framework{"framework", {}},
      core_wait{"waiting for a CPU core (within the others)", {}};
  BarChart::Series peak{"peak added by training, measured", {}},
      peak_predicted{"peak, predicted by the planner from the profile", {}}, weights{"weight copies", {}};
  for (const auto& r : ranks) {
    bubble.values.push_back(r.field("bubble_fraction").asNumber());
    bubble_predicted.values.push_back(numberOr(r, "predicted_bubble_fraction"));
    allreduce.values.push_back(r.has("allreduce_fraction") ? r.field("allreduce_fraction").asNumber() : 0.0);
    wait.values.push_back(numberOr(r, "wait_fraction"));
    framework.values.push_back(numberOr(r, "overhead_fraction"));
    const double core = numberOr(r, "core_wait_fraction");
    core_wait.values.push_back(core >= 0 ? core : NAN);
    peak.values.push_back(memoryAddedByTraining(r));
    peak_predicted.values.push_back(numberOr(r, "predicted_peak_memory_bytes"));
    weights.values.push_back(numberOr(r, "weight_bytes"));
  }
  idle.series = {bubble, bubble_predicted};
  if (std::any_of(allreduce.values.begin(), allreduce.values.end(), [](double v) { return v > 0; }))
    idle.series.push_back(allreduce);
  idle.series.insert(idle.series.end(), {wait, framework, core_wait});
  memory.series = {peak};
  if (std::any_of(peak_predicted.values.begin(), peak_predicted.values.end(), [](double v) { return std::isfinite(v); }))
    memory.series.push_back(peak_predicted);
  memory.series.push_back(weights);
  page.bars = {idle, memory};

  LineChart loss{"loss", "Training loss", "seconds since training began", "loss", INFINITY, {}};
  LineChart accuracy{"accuracy", "Test accuracy", "seconds since training began", "accuracy", 1.0, {}};
  LineChart::Series train_loss{"training loss (each mini-batch)", {}, false}, test_loss{"test loss", {}, true},
      test_accuracy{"test accuracy", {}, true};
  // An evaluation, from the log or the summary's history (the same fields); -1 = none.
  auto addEvaluation = [&](const JsonCursor& e) {
    const double t = e.field("wall_seconds").asNumber();
    if (e.field("test_loss").asNumber() >= 0) test_loss.points.push_back({t, e.field("test_loss").asNumber()});
    if (e.field("test_accuracy").asNumber() >= 0)
      test_accuracy.points.push_back({t, e.field("test_accuracy").asNumber()});
  };
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    const JsonCursor m(metrics[i], origin + " metrics", "line " + std::to_string(i + 1));
    const std::string event = m.field("event").asString();
    if (event == "step") train_loss.points.push_back({m.field("wall_seconds").asNumber(), m.field("loss").asNumber()});
    if (event == "eval") addEvaluation(m);
  }
  if (metrics.empty())  // no log: the evaluations the summary keeps
    for (const auto& e : s.field("history").asArray()) addEvaluation(e);
  loss.series = {train_loss, test_loss};
  accuracy.series = {test_accuracy};
  if (!train_loss.points.empty() || !test_loss.points.empty()) page.lines.push_back(loss);
  if (!test_accuracy.points.empty()) page.lines.push_back(accuracy);
  return page;
}

std::string beforeTrainingText(const JsonCursor& planner) {
  if (!planner.has("profile") || !planner.has("planning_seconds")) return "";
  const JsonCursor profile = planner.field("profile");
  std::string text = text::format("profiling %.1f s", profile.field("seconds").asNumber());
  if (profile.boolOr("cached", false))
    text += text::format(" (from the profile cache; measuring it took %.1f s on ", profile.numberOr("measured_seconds", 0)) +
            profile.stringOr("measured", "?") + ")";
  text += text::format(", planning %.2f s", planner.field("planning_seconds").asNumber());
  if (planner.has("calibration")) {
    const JsonCursor c = planner.field("calibration");
    text += text::format(", calibrating update rules %.1f s", c.field("seconds").asNumber()) +
            text::format(" (%.0f trained", c.field("rules_measured").asNumber()) +
            text::format(", %.0f from the cache)", c.field("rules_cached").asNumber());
  }
  return text;
}

Json tableToJson(const Table& t) {
  return {{"caption", t.caption}, {"header", t.header}, {"rows", t.rows}, {"highlighted_row", t.highlighted_row}};
}

Table tableFromJson(const Json& json, const std::string& origin) {
  const JsonCursor c(json, origin);
  Table t;
  t.caption = c.stringOr("caption", "");
  t.header = c.field("header").asStringArray();
  for (const auto& row : c.field("rows").asArray()) {
    t.rows.push_back(row.asStringArray());
    if (t.rows.back().size() != t.header.size())
      throw Error(row.where() + ": " + std::to_string(t.rows.back().size()) + " cells under " +
                  std::to_string(t.header.size()) + " columns");
  }
  t.highlighted_row = static_cast<int>(c.intOr("highlighted_row", -1));
  return t;
}

std::vector<Json> readJsonLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open file");
  std::vector<Json> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(Json::parse(line));
    } catch (const Json::parse_error& e) {
      throw Error(path + ": line " + std::to_string(n) + " is not JSON (" + e.what() + ")");
    }
  }
  return out;
}

}  // namespace pipetrain::report
