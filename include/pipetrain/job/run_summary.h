// A finished training job, summed up from its ranks' results: the summary that
// `--summary-json` writes and the report reads (report/train_summary.h), and the notes a
// user should read. On the way, the run's stage times and memory sharpen the cached
// profile it was planned from.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/job/console.h"
#include "pipetrain/job/local_launch.h"
#include "pipetrain/job/train_request.h"
#include "pipetrain/report/train_summary.h"

namespace pipetrain::job {

struct RunSummary {
  report::TrainSummary record;
  // What to say of how the run trained: asynchronous updates, batch norm over
  // micro-batches.
  std::vector<std::string> notes;
};

RunSummary summarizeRun(const TrainRequest& request, const models::Model& model, const LaunchedRun& run,
                        const Say& say);

// Writes what `request` asks for beyond the summary's printing: the trace, the Gantt
// chart, the summary's JSON and the report page. Returns a line per file written
// ("trace: PATH").
std::vector<std::string> writeRunOutputs(const TrainRequest& request, const RunSummary& summary);

}  // namespace pipetrain::job
