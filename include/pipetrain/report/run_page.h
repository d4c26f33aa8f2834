// A training run's report page and console lines, from its summary (train_summary.h)
// and metrics log (docs/report.md).
#pragma once

#include <string>
#include <vector>

#include "pipetrain/report/report.h"
#include "pipetrain/report/train_summary.h"

namespace pipetrain::report {

// The console's line for one rank: where its step went, its weights and its memory
// beside the predictions.
std::string rankSummaryLine(const RankSummary& rank);

// A note for each rank whose measured memory and the planner's prediction of it differ
// by more than 10% (memoryNotes, `brief` as there).
std::vector<std::string> memoryNotesOfRun(const TrainSummary& summary, bool brief = false);
// The same for the cores' speed against the profile's (coreSpeedNotes).
std::vector<std::string> coreSpeedNotesOfRun(const TrainSummary& summary);

// `metrics`: the lines of `train --log-jsonl`; `origin` names where they came from.
Page pageForRun(const TrainSummary& summary, const std::vector<json_io::Json>& metrics, const std::string& origin);

// What came before training: "profiling 0.0 s (from the cache, measured in 312 s on
// ...), planning 0.02 s" (and calibrating, under time to accuracy).
std::string beforeTrainingText(const PlannerRecord& planner);

}  // namespace pipetrain::report
