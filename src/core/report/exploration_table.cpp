#include "pipetrain/report/exploration_table.h"

#include <algorithm>
#include <cstdio>

#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/text.h"

namespace pipetrain::report {

Table explorationTable(const planner::Exploration& e, int top) {
  Table t;
  t.caption = "The planner's ranking (predicted, steady state). by: what proposed the plan (chain: PipeDream's "
              "partitioner over the layers in order; graph: GraphPipe's, branches as parallel stages; balanced: "
              "equal stages for a schedule that places several on a device; refined: a simulated neighbour of "
              "one of those)";
  // The longest path of stages is their number but where branches run side by side.
  bool branches = false;
  bool recomputing = false;
  for (const auto& c : e.ranked) {
    branches = branches || c.depth != c.plan.numStages();
    recomputing = recomputing || !plan::recomputedStages(c.plan).empty();
  }
  t.header = {"#", "schedule", "by", "stages"};
  if (branches) t.header.push_back("depth");
  if (recomputing) {
    t.header.push_back("recompute");
    t.caption += ". recompute: the stages that run their forward pass again before the backward pass, to fit memory";
  }
  for (const char* h : {"stages x repl", "mb", "m", "samples/s", "iter ms", "bubble", "peak mem"}) t.header.push_back(h);
  const planner::PlanObjective& objective = *e.objective;
  for (std::string h : objective.header()) t.header.push_back(std::move(h));
  if (const std::string caption = objective.caption(); !caption.empty()) t.caption += ". " + caption;
  t.highlighted_row = 0;
  // Synchronous data parallelism is listed once, at its best (planner::sameDataParallelRun).
  std::vector<const plan::Plan*> listed;
  for (const auto& c : e.ranked) {
    if (static_cast<int>(t.rows.size()) >= top) break;
    if (std::any_of(listed.begin(), listed.end(),
                    [&](const plan::Plan* p) { return planner::sameDataParallelRun(*p, c.plan); }))
      continue;
    listed.push_back(&c.plan);
    std::string schedule = c.plan.schedule.name;
    if (planner::isDataParallel(c.plan))
      schedule = "data parallel";
    else if (schedule::isAsynchronous(schedule))
      schedule += "*";
    std::vector<std::string> row{std::to_string(t.rows.size() + 1), schedule, c.partitioner,
                                 std::to_string(c.plan.numStages())};
    if (branches) row.push_back(std::to_string(c.depth));
    if (recomputing) {
      const std::string stages = plan::recomputedStages(c.plan);
      row.push_back(stages.empty() ? "-" : stages);
    }
    for (std::string cell : {plan::stageShape(c.plan), std::to_string(c.plan.microbatch_size),
                             std::to_string(c.plan.microbatches), text::format("%.6g", c.report.throughput),
                             text::format("%.4g", c.report.iteration_time * 1e3),
                             text::format("%.1f%%", 100 * c.report.bubble_fraction),
                             text::humanBytes(static_cast<double>(c.report.peakMemoryBytes()))})
      row.push_back(std::move(cell));
    for (std::string cell : objective.cells(c)) row.push_back(std::move(cell));
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::vector<std::string> explorationNotes(const planner::Exploration& e) {
  std::vector<std::string> notes;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%zu candidates ranked, %d proposals and %d combinations pruned by their bounds, %zu "
                "combinations dropped, searched in %.3f s",
                e.ranked.size(), e.pruned, e.pruned_combinations, e.dropped.size(), e.search_seconds);
  notes.push_back(buf);
  notes.push_back(e.async_included
                      ? "* asynchronous: trains with stale weights, not synchronous SGD"
                      : "asynchronous schedules (pipedream, 2bw, pipemare) not considered; --allow-async adds them");
  if (e.below_timed_batch > 0)
    notes.push_back("note: no plan fitted at micro-batches of " + std::to_string(e.below_timed_batch) +
                    " samples or more, the sizes the profile timed, so smaller ones were tried; their times scale "
                    "in proportion from " + std::to_string(e.below_timed_batch) +
                    " samples, which is optimistic (profile at the smaller size to price it)");
  // Why it ranked as it did, in the objective's words.
  for (const std::string& note : e.ranking_notes) notes.push_back(note);
  e.objective->addNotes(e, notes);
  if (const std::string note = e.idleDevicesNote(); !note.empty()) notes.push_back("warning: " + note);
  for (const std::string& note : e.graph_notes) notes.push_back("graph partitioner: " + note);
  const auto& best = e.best();
  // A pipeline with fewer micro-batches than stages cannot fill: say so rather than train
  // it idle without a word (a batch of 1 on 2 ranks).
  if (best.plan.numStages() > 1 && best.plan.microbatches < best.plan.numStages()) {
    std::snprintf(buf, sizeof buf,
                  "note: the chosen plan's ranks idle %.0f%% of the time: a mini-batch of %lld samples makes %d "
                  "micro-batch(es) for %d stages; a larger batch fills the pipeline, fewer ranks waste less",
                  100 * best.report.bubble_fraction,
                  static_cast<long long>(best.plan.microbatch_size) * best.plan.microbatches, best.plan.microbatches,
                  best.plan.numStages());
    notes.push_back(buf);
  }
  std::snprintf(buf, sizeof buf, "chosen: %s, micro-batch %lld x %d, predicted %.6g samples/s",
                planner::planName(best.plan).c_str(), static_cast<long long>(best.plan.microbatch_size),
                best.plan.microbatches, best.report.throughput);
  std::string chosen = buf;
  notes.push_back(chosen + e.objective->chosenClause(best));
  return notes;
}

}  // namespace pipetrain::report
