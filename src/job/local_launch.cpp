#include "pipetrain/job/local_launch.h"

#include <chrono>

#include "pipetrain/job/launcher.h"
#include "pipetrain/job/rank_spec.h"
#include "pipetrain/torch/checkpoint.h"
#include "pipetrain/util/clock.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

// The newest intact checkpoint in `dir` ("" when there is none, or no folder).
std::string newestCheckpoint(const std::string& dir) {
  if (dir.empty()) return "";
  try {
    return runtime::findCheckpoint(dir).dir;
  } catch (const Error&) {
    return "";
  }
}

std::string howToResume(const std::string& newest) {
  if (newest.empty()) return "no checkpoint was written (--checkpoint-dir makes a run resumable)";
  return "the newest intact checkpoint is " + newest + ": run the same command with --resume " + newest +
         " to go on from it";
}

}  // namespace

LaunchedRun launchRanks(TrainRequest& request, const models::Model& model, std::string plan_out,
                        const LaunchWatch& watch) {
  std::vector<RankOutput> outputs;
  std::vector<std::string> argv = rankCommand(request);
  std::vector<report::RunEvent> events;
  const auto start = std::chrono::steady_clock::now();
  const auto record = [&](const char* event, const std::string& checkpoint, const std::string& why) {
    events.push_back({secondsSince(start), event, request.ranks.nproc, checkpoint, why});
  };
  for (int attempt = 0;; ++attempt) {
    try {
      outputs = launchLocal(
          argv, request.ranks.nproc, request.blasThreadsPerRank(),
          [&](int, const std::string& line) {
            if (const auto progress = readProgressReport(line))
              watch.progress(*progress);
            else
              watch.line(line);
          },
          request.concurrentRanks());
      break;
    } catch (const Error& e) {
      const std::string newest = newestCheckpoint(request.config.checkpoint_dir);
      if (attempt < request.ranks.max_restarts) {
        watch.restart(std::string(e.what()) + "\npipetrain: restart " + std::to_string(attempt + 1) + " of " +
                      std::to_string(request.ranks.max_restarts) +
                      (newest.empty() ? ", from the start" : ", from checkpoint " + newest));
        record("restart", newest, e.what());
        if (!newest.empty()) request.config.resume = newest;
        argv = rankCommand(request);
        continue;
      }
      if (request.ranks.min_nproc <= 0 || request.ranks.nproc <= request.ranks.min_nproc || newest.empty())
        throw Error(
            std::string(e.what()) + "\n" + howToResume(newest) +
            (request.ranks.min_nproc > 0 && newest.empty() ? " (going on with fewer ranks needs a checkpoint)" : ""));
      // Lost for good: the ranks left go on from the newest checkpoint, resharded to a
      // plan made for them (any plan loads a checkpoint).
      const runtime::Checkpoint from = runtime::findCheckpoint(newest);
      --request.ranks.nproc;
      watch.restart(std::string(e.what()) + "\npipetrain: the restarts are spent; going on with " +
                    std::to_string(request.ranks.nproc) + " ranks from checkpoint " + from.dir +
                    ", re-planned for them");
      record("shrink", from.dir, e.what());
      request.planning.plan_file.clear();
      request.config.resume = from.dir;
      watch.replanned(decidePlan(request, model, {&from, true, plan_out, {}}, watch.say));
      runtime::checkConfig(request.config, model, request.ranks.nproc);
      argv = rankCommand(request);
      attempt = -1;  // the restarts start again for the smaller job
    }
  }
  LaunchedRun run;
  run.wall_seconds = secondsSince(start);
  run.events = std::move(events);
  for (const RankOutput& o : outputs) {
    const std::string origin = "rank " + std::to_string(o.rank) + "'s result";
    if (o.result_json.empty()) throw Error("rank " + std::to_string(o.rank) + " ended without reporting a result");
    json_io::Json result;
    try {
      result = json_io::Json::parse(o.result_json);
    } catch (const json_io::Json::exception& e) {
      throw Error(origin + " is not JSON (" + e.what() + ")");
    }
    run.ranks.push_back(rankResultFromJson(result, origin));
  }
  return run;
}

}  // namespace pipetrain::job
