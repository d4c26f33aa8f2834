#include "pipetrain/report/pages.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "pipetrain/report/exploration_table.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::report {
namespace {

using json_io::Json;
using json_io::JsonCursor;

std::string layerSpan(const std::vector<std::string>& layers) {
  if (layers.size() == 1) return layers.front();
  return layers.front() + " .. " + layers.back() + " (" + std::to_string(layers.size()) + " layers)";
}

}  // namespace

std::vector<std::string> rankNames(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t r = 0; r < n; ++r) out.push_back("rank " + std::to_string(r));
  return out;
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
