#include "train_console.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "plan_table.h"
#include "pipetrain/report/run_page.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

// "epoch 1  step 20/112  loss 0.3640  20513 samples/s  ETA 3 s": what a user reads.
std::string progressLine(const job::ProgressReport& p, int64_t samples_per_step) {
  const double eta =  // this epoch's
      p.samples_per_second > 0 ? (p.steps - p.step) * samples_per_step / p.samples_per_second : 0;
  return job::formatted("epoch %d  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %.0f s", p.epoch + 1,
                        static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss,
                        p.samples_per_second, eta);
}

// "1 rank", "2 ranks".
std::string ranks(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

}  // namespace

ProgressDisplay::ProgressDisplay(int64_t samples_per_step, bool in_place)
    : samples_per_step_(samples_per_step),
      in_place_(in_place && isatty(STDOUT_FILENO)),
      last_plain_(std::chrono::steady_clock::now()) {}

ProgressDisplay::~ProgressDisplay() { endLine(); }

void ProgressDisplay::endLine() {
  if (in_place_ && shown_) std::cout << "\n" << std::flush;
  shown_ = false;
}

void ProgressDisplay::show(const job::ProgressReport& p) {
  const std::string text = progressLine(p, samples_per_step_);
  if (in_place_) {
    std::cout << "\r" << text << "   " << std::flush;
    shown_ = true;
    return;
  }
  if (std::chrono::steady_clock::now() - last_plain_ <= std::chrono::seconds(10) && p.step != p.steps) return;
  last_plain_ = std::chrono::steady_clock::now();
  std::cout << text << std::endl;
}

void printPlanned(const job::LocalPlan& planned, int rank_count, const std::string& plan_path) {
  const double planning = planned.planner.planning_seconds;
  if (planned.planner.calibration)
    std::printf("planned for %s in %.2f s, after %.1f s of calibration:\n", ranks(rank_count).c_str(), planning,
                planned.planner.calibration->seconds);
  else
    std::printf("planned for %s in %.2f s:\n", ranks(rank_count).c_str(), planning);
  printExploration(planned.exploration, 5);
  std::printf("what the plan sends per mini-batch, by the link it crosses:%s\n",
              planned.planner.links.empty() ? " nothing (one rank)" : "");
  for (const sim::LinkTraffic& t : planned.planner.links)
    std::printf("  %s over '%s': %s (%.3f s on the wire)\n", t.what.c_str(), t.link.c_str(),
                text::humanBytes(t.bytes).c_str(), t.wire_seconds);
  if (plan_path.empty()) std::printf("profile: %s\n", planned.profile_path.c_str());
  else std::printf("plan: %s (profile: %s)\n", plan_path.c_str(), planned.profile_path.c_str());
  std::fflush(stdout);
}

void printRunSummary(const job::TrainRequest& request, const job::RunSummary& summary) {
  const report::TrainSummary& s = summary.record;
  const std::string how = planner::isDataParallel(request.config.plan) ? "data parallelism" : s.schedule;
  std::printf("trained %s with %s on %s: %lld samples, %.1f samples/s, wall %.1f s\n", request.config.model.c_str(),
              how.c_str(), ranks(request.ranks.nproc).c_str(), static_cast<long long>(s.samples), s.throughput,
              s.wall_seconds);
  if (!request.config.export_path.empty())
    std::printf("exported the trained model to %s\n", request.config.export_path.c_str());
  for (const std::string& note : summary.notes) std::printf("note: %s\n", note.c_str());
  std::printf("simulator, from the measured stage times: %.1f samples/s\n", s.predicted_throughput);
  if (request.planning.record)
    std::printf("before training: %s\n", report::beforeTrainingText(*request.planning.record).c_str());
  // A regression (float targets) has a test loss and no accuracy.
  std::string figures;
  if (s.test_accuracy) figures += job::formatted("test accuracy %.4f, ", *s.test_accuracy);
  if (s.test_loss) figures += job::formatted("test loss %.4f, ", *s.test_loss);
  std::printf("%sfinal training loss %.4f\n", figures.c_str(), s.final_loss);
  for (const report::RankSummary& r : s.ranks) std::printf("%s\n", report::rankSummaryLine(r).c_str());
  // Each rank's memory against the prediction in one line; why, at length, is the
  // report's (and the summary's) to say.
  for (const std::string& note : report::memoryNotesOfRun(s, /*brief=*/true))
    std::printf("memory: %s%s\n", note.c_str(), request.outputs.report_dir.empty() ? "" : " (the report says why)");
  for (const std::string& note : report::coreSpeedNotesOfRun(s)) std::printf("speed: %s\n", note.c_str());
  for (const std::string& line : job::writeRunOutputs(request, summary)) std::printf("%s\n", line.c_str());
}

void printRankResult(const runtime::RankResult& result) {
  std::printf("rank %d: stages", result.rank);
  for (int s : result.stages) std::printf(" %d", s);
  std::printf(", %lld samples in %.2f s, bubble %.1f%%%s\n", static_cast<long long>(result.samples),
              result.train_seconds, 100 * (1 - result.busy_seconds / result.train_seconds),
              result.last_stage ? (", loss " + std::to_string(result.final_loss)).c_str() : "");
  if (result.test_accuracy >= 0) std::printf("test accuracy %.4f\n", result.test_accuracy);
  std::fflush(stdout);
}

}  // namespace pipetrain::cli
