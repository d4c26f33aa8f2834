#include "plan_table.h"

#include <algorithm>
#include <cstdio>

#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {

std::string stageShape(const plan::Plan& plan) {
  std::string out;
  for (int s = 0; s < plan.numStages();) {
    const std::size_t replicas = plan.stages[s].devices.size();
    int run = 1;
    while (s + run < plan.numStages() && plan.stages[s + run].devices.size() == replicas) ++run;
    if (!out.empty()) out += "+";
    out += std::to_string(run) + "x" + std::to_string(replicas);
    s += run;
  }
  return out;
}

void printExploration(const planner::Exploration& e, int top) {
  std::printf("%-4s %-12s %-7s %-14s %6s %5s %14s %11s %7s %12s\n", "rank", "schedule", "stages", "stages x repl",
              "mb", "m", "samples/s", "iter ms", "bubble", "peak mem");
  const int rows = std::min<int>(top, static_cast<int>(e.ranked.size()));
  for (int i = 0; i < rows; ++i) {
    const auto& c = e.ranked[i];
    std::string schedule = c.plan.schedule.name;
    if (schedule::isAsynchronous(schedule)) schedule += "*";
    std::printf("%-4d %-12s %-7d %-14s %6lld %5d %14.6g %11.4g %6.1f%% %12s\n", i + 1, schedule.c_str(),
                c.plan.numStages(), stageShape(c.plan).c_str(), static_cast<long long>(c.plan.microbatch_size),
                c.plan.microbatches, c.report.throughput, c.report.iteration_time * 1e3, 100 * c.report.bubble_fraction,
                text::humanBytes(static_cast<double>(c.report.peakMemoryBytes())).c_str());
  }
  std::printf("%zu candidates ranked, %d pruned by their compute bound, %zu combinations dropped, searched in %.3f s\n",
              e.ranked.size(), e.pruned, e.dropped.size(), e.search_seconds);
  if (e.async_included)
    std::printf("* asynchronous: trains with stale weights, not synchronous SGD\n");
  else
    std::printf("asynchronous schedules (pipedream, 2bw, pipemare) not considered; --allow-async adds them\n");
  if (e.ranked.size() > 1) std::printf("runner-up lost: %s\n", e.runnerUpLost().c_str());
  const auto& best = e.best();
  if (const std::string note = e.idleDevicesNote(); !note.empty()) std::printf("warning: %s\n", note.c_str());
  std::printf("chosen: %s, %d stages (%s), micro-batch %lld x %d, predicted %.6g samples/s\n",
              best.plan.schedule.name.c_str(), best.plan.numStages(), stageShape(best.plan).c_str(),
              static_cast<long long>(best.plan.microbatch_size), best.plan.microbatches, best.report.throughput);
}

}  // namespace pipetrain::cli
