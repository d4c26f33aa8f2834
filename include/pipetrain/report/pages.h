// The report page (include/pipetrain/report/report.h) filled from what the planning
// commands know: a planner exploration, a simulation (run_page.h: a training run).
#pragma once

#include <string>
#include <vector>

#include "pipetrain/planner/explore.h"
#include "pipetrain/report/report.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::report {

// "rank 0", "rank 1", ...: the categories of per-rank bars.
std::vector<std::string> rankNames(std::size_t ranks);

// A plan's stages: layers, replicas and the devices that run them.
Table planStagesTable(const plan::Plan& plan);

// The simulator's per-rank idle share and memory as bars.
std::vector<BarChart> predictedRankBars(const sim::Report& report);

Page pageForExploration(const planner::Exploration& e, const graph::LayerGraph& graph,
                                const cluster::ClusterSpec& cluster, const std::string& title);
Page pageForSimulation(const sim::Evaluation& e, const plan::Plan& plan, const std::string& title);

json_io::Json tableToJson(const Table& table);
Table tableFromJson(const json_io::Json& json, const std::string& origin);

// One JSON value per non-empty line; an Error names the file and the line.
std::vector<json_io::Json> readJsonLines(const std::string& path);

}  // namespace pipetrain::report
