// `pipetrain plan`: find a plan for a profiled model on a cluster (schedule, stages,
// replicas, micro-batches), print the ranked alternatives and write the best.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "options.h"
#include "plan_table.h"
#include "pipetrain/planner/plan_job.h"
#include "pipetrain/planner/planner_options.h"
#include "pipetrain/report/pages.h"

namespace pipetrain::cli {
namespace {

struct PlanCommandArgs {
  planner::PlanRequest request;
  std::string out, report;
  int top = 10;
  bool json = false;
};

int run(const PlanCommandArgs& a) {
  const planner::PlannedFromFiles planned = planner::planFromFiles(a.request);
  const planner::Exploration& e = planned.exploration;
  if (!a.out.empty()) json_io::writeFile(a.out, e.best().plan.toJson());
  if (!a.report.empty())
    report::writeHtml(report::pageForExploration(e, planned.graph, planned.cluster,
                                                 "Plan for " + a.request.graph + " on " + a.request.cluster),
                      a.report);
  if (a.json) {
    json_io::Json j = e.toJson();
    if (!planned.note.empty()) j["profile_note"] = planned.note;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  if (!planned.note.empty()) std::cout << "note: " << planned.note << "\n";
  printExploration(e, a.top);
  if (!a.out.empty()) std::cout << "plan: " << a.out << "\n";
  if (!a.report.empty()) std::cout << "report: " << a.report << "\n";
  return 0;
}

}  // namespace

Command addPlanCommand(CLI::App& app) {
  auto a = std::make_shared<PlanCommandArgs>();
  planner::PlanRequest& r = a->request;
  CLI::App* cmd = app.add_subcommand("plan", "Choose schedule, stages, replicas and micro-batches for a model on a cluster");
  cmd->add_option("--graph", r.graph, "layer graph JSON (from `pipetrain profile`)")->required();
  cmd->add_option("--cluster", r.cluster, "cluster spec JSON")->required();
  cmd->add_option("--batch", r.explore.global_batch, "samples per optimizer step")->required()->check(positive());
  cmd->add_option("--schedule", r.explore.schedule, "auto (explore all) or one schedule name")->capture_default_str();
  cmd->add_flag("--allow-async", r.explore.allow_async,
                "let auto consider asynchronous schedules (pipedream, 2bw, pipemare), which change training semantics");
  cmd->add_option("--microbatch-sizes", r.explore.microbatch_sizes,
                  "micro-batch sizes to try (default: powers of two dividing --batch)")->delimiter(',');
  cmd->add_option("--microbatches", r.microbatches, "micro-batches per mini-batch (default: the planner's choice)")
      ->check(positive());
  cmd->add_flag("--no-replication", [a](int64_t) { a->request.explore.max_replicas = 1; },
                "plan pure pipelines: no stage on more than one device");
  cmd->add_flag("--use-all-devices", r.explore.use_all_devices,
                "only plans that occupy every device of the cluster (as `train` plans its ranks)");
  cmd->add_option("--max-blocks", r.explore.max_blocks, "plan longer chains over this many blocks of layers")
      ->check(positive())->capture_default_str();
  cmd->add_flag("--exhaustive", [a](int64_t) { a->request.explore.prune = false; },
                "simulate every proposal, also those whose bound (compute, ports, round trips) cannot beat the best (slower, same choice)");
  cmd->add_option("--calibration", r.calibration,
                  "time to accuracy: the update rules' calibration (train --objective time-to-accuracy caches it "
                  "beside its profile as *.calibration.json)");
  addOptions(cmd, {planner::objectiveOption(r.explore.objective, "Options", ""),
                   planner::partitionerOption(r.explore.partitioner, "Options"),
                   planner::recomputeOption(r.explore.recompute, "Options")});
  cmd->add_option("--out", a->out, "write the chosen plan JSON here");
  cmd->add_option("--report", a->report, "write an HTML report (the plan, the ranking, the predicted Gantt chart)");
  cmd->add_option("--top", a->top, "rows of the ranked table")->check(positive())->capture_default_str();
  cmd->add_flag("--json", a->json, "print the choice and the table as one JSON object");
  return {cmd, [a] { return run(*a); }};
}

}  // namespace pipetrain::cli
