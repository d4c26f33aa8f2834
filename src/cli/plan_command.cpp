// `pipetrain plan`: find a plan for a profiled model on a cluster (schedule, stages,
// replicas, micro-batches), print the ranked alternatives and write the best.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "options.h"
#include "plan_table.h"
#include "pipetrain/planner/plan_job.h"
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
  addOptions(cmd, planner::planOptions(r));
  cmd->add_option("--out", a->out, "write the chosen plan JSON here");
  cmd->add_option("--report", a->report, "write an HTML report (the plan, the ranking, the predicted Gantt chart)");
  cmd->add_option("--top", a->top, "rows of the ranked table")->check(positive())->capture_default_str();
  cmd->add_flag("--json", a->json, "print the choice and the table as one JSON object");
  return {cmd, [a] { return run(*a); }};
}

}  // namespace pipetrain::cli
