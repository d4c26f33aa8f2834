// The report page (include/pipetrain/report/report.h) filled from what each command
// knows: a train summary and its metrics log, a planner exploration, a simulation.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/planner/explore.h"
#include "pipetrain/report/report.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::report {

// A plan's stages: layers, replicas and the devices that run them.
Table planStagesTable(const plan::Plan& plan);

// The simulator's per-rank idle share and memory as bars.
std::vector<BarChart> predictedRankBars(const sim::Report& report);

Page pageForExploration(const planner::Exploration& e, const graph::LayerGraph& graph,
                                const cluster::ClusterSpec& cluster, const std::string& title);
Page pageForSimulation(const sim::Evaluation& e, const plan::Plan& plan, const std::string& title);

// From `train --summary-json` and `--log-jsonl` (docs/report.md).
// What training added to a rank's process at its peak: its peak resident set less the
// one before the model was built (LibTorch's own ~170 MiB left out), from a rank's result
// or its entry in a run's summary.
double memoryAddedByTraining(const json_io::JsonCursor& rank);

// The console's line for one rank of a run's summary: where its step went, its weights
// and its memory beside the predictions.
std::string rankSummaryLine(const json_io::Json& rank);

// A note for each rank whose measured memory and the planner's prediction of it differ
// by more than 10% (memoryNotes, `brief` as there), from a `train --summary-json` summary.
std::vector<std::string> memoryNotesOfRun(const json_io::Json& summary, const std::string& origin,
                                          bool brief = false);
// The same for the cores' speed against the profile's (coreSpeedNotes).
std::vector<std::string> coreSpeedNotesOfRun(const json_io::Json& summary, const std::string& origin);

Page pageForRun(const json_io::Json& summary, const std::vector<json_io::Json>& metrics,
                        const std::string& origin);

// What came before training, from a run summary's "planner" (job/local_plan.h): "profiling
// 0.0 s (from the cache, measured in 312 s on ...), planning 0.02 s" (and calibrating,
// under time to accuracy); "" when the
// summary holds no such figures (a plan file, or a summary from before them).
std::string beforeTrainingText(const json_io::JsonCursor& planner);

json_io::Json tableToJson(const Table& table);
Table tableFromJson(const json_io::Json& json, const std::string& origin);

// One JSON value per non-empty line; an Error names the file and the line.
std::vector<json_io::Json> readJsonLines(const std::string& path);

}  // namespace pipetrain::report
