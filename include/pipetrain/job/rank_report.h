// What a rank started by the launcher tells it, over the rank's standard output: a
// PROGRESS line now and then while it trains, and one RESULT line at the end. Each
// kind of line is written and read here, its reader beside its writer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pipetrain/job/launcher.h"
#include "pipetrain/report/train_summary.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::job {

struct ProgressReport {
  int epoch = 0;  // 0-based
  int64_t step = 0, steps = 0;
  double loss = 0;
  double samples_per_second = 0;
};

// "PROGRESS 0 20 112 0.364000 20513.000"
std::string progressReportLine(const ProgressReport& p);
// The report a PROGRESS line carries; nothing for any other line (which the launcher
// passes on as it is).
std::optional<ProgressReport> readProgressReport(const std::string& line);

// One evaluation, and the mean time of each stage's kind of action, as the run's summary
// holds them (report/train_summary.h), which a rank's result and the metrics log write
// as the summary does.
report::Evaluation evaluationOf(const runtime::EvalPoint& e);
std::vector<report::ActionTime> actionTimesOf(const std::vector<runtime::RankResult::ActionSeconds>& all);

// The RESULT line (launcher.h, kResultPrefix) carries a rank's result as one JSON
// value, without its parameters (which stay with the rank).
json_io::Json rankResultToJson(const runtime::RankResult& r);
// Its reader: throws Error naming `origin` and the field that is missing or wrong.
runtime::RankResult rankResultFromJson(const json_io::Json& json, const std::string& origin);

}  // namespace pipetrain::job
