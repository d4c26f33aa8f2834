// `pipetrain plan`: find a plan for a profiled model on a cluster (schedule, stages,
// replicas, micro-batches), print the ranked alternatives and write the best.
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "options.h"
#include "pipetrain/planner/planner_options.h"
#include "plan_table.h"
#include "pipetrain/report/pages.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/time_to_target.h"
#include "pipetrain/planner/profile_fit.h"
#include "pipetrain/util/error.h"

namespace pipetrain::cli {
namespace {

struct PlanCommandArgs {
  std::string graph, cluster, out, report, calibration;
  planner::ExploreOptions explore;
  int microbatches = 0;  // 0: the planner's choice
  int top = 10;
  bool json = false;
};

// A calibration file `train --objective time-to-accuracy` wrote: the rules it holds are
// known, the others are left unmeasured (the ranking lists them after the others).
class CalibrationFile : public planner::Calibrator {
 public:
  CalibrationFile(std::string path, int64_t batch)
      : path_(std::move(path)), batch_(batch), calibration_(planner::Calibration::load(path_)),
        measured_synchronous_(calibration_.synchronous_key) {}
  planner::Calibration& calibration() override { return calibration_; }
  void measure(const planner::RuleToCalibrate& rule, bool repeat) override {
    const std::string again = "; calibrate at this batch (train --batch " + std::to_string(batch_) +
                              " --objective time-to-accuracy --allow-async)";
    if (repeat) throw Error(path_ + " holds no second run of the synchronous rule (an interrupted calibration)" + again);
    if (rule.rule.synchronous)
      throw Error(path_ + " holds no curve of '" + rule.rule.key + "': it calibrated '" + measured_synchronous_ + "'" + again);
    // An asynchronous rule the file lacks stays uncalibrated: no curve, no estimate.
  }

 private:
  std::string path_;
  int64_t batch_;
  planner::Calibration calibration_;
  std::string measured_synchronous_;
};

int run(PlanCommandArgs a) {
  const auto graph = graph::LayerGraph::load(a.graph);
  const planner::ProfileFit fit = planner::fitProfileToCluster(graph, cluster::ClusterSpec::load(a.cluster));
  const cluster::ClusterSpec& cluster = fit.cluster;
  if (a.microbatches > 0) {
    if (!a.explore.microbatch_sizes.empty()) throw Error("give --microbatches or --microbatch-sizes, not both");
    if (a.explore.global_batch % a.microbatches != 0)
      throw Error("--microbatches " + std::to_string(a.microbatches) + " does not divide --batch " +
                  std::to_string(a.explore.global_batch));
    a.explore.microbatch_sizes = {a.explore.global_batch / a.microbatches};
  }
  const std::string objective = a.explore.objective->name();
  if (a.explore.objective->needsCalibrator() && a.calibration.empty())
    throw Error("--objective " + objective + " needs --calibration FILE: the update rules' progress per sample, as "
                "`pipetrain train --objective " + objective + " --allow-async` measures and caches it beside its "
                "profile (*.calibration.json)");
  if (!a.calibration.empty() && !a.explore.objective->needsCalibrator())
    throw Error("--calibration is not read under --objective " + objective);
  std::unique_ptr<CalibrationFile> file;
  planner::ObjectiveInputs inputs;
  if (!a.calibration.empty()) {
    file = std::make_unique<CalibrationFile>(a.calibration, a.explore.global_batch);
    inputs.calibrator = [&file]() -> planner::Calibrator& { return *file; };
  }
  const planner::Exploration e = planner::explore(graph, cluster, a.explore, inputs);
  if (!a.out.empty()) json_io::writeFile(a.out, e.best().plan.toJson());
  if (!a.report.empty())
    report::writeHtml(report::pageForExploration(e, graph, cluster, "Plan for " + a.graph + " on " + a.cluster), a.report);
  if (a.json) {
    json_io::Json j = e.toJson();
    if (!fit.note.empty()) j["profile_note"] = fit.note;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  if (!fit.note.empty()) std::cout << "note: " << fit.note << "\n";
  printExploration(e, a.top);
  if (!a.out.empty()) std::cout << "plan: " << a.out << "\n";
  if (!a.report.empty()) std::cout << "report: " << a.report << "\n";
  return 0;
}

}  // namespace

Command addPlanCommand(CLI::App& app) {
  auto a = std::make_shared<PlanCommandArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Choose schedule, stages, replicas and micro-batches for a model on a cluster");
  cmd->add_option("--graph", a->graph, "layer graph JSON (from `pipetrain profile`)")->required();
  cmd->add_option("--cluster", a->cluster, "cluster spec JSON")->required();
  cmd->add_option("--batch", a->explore.global_batch, "samples per optimizer step")->required()->check(positive());
  cmd->add_option("--schedule", a->explore.schedule, "auto (explore all) or one schedule name")->capture_default_str();
  cmd->add_flag("--allow-async", a->explore.allow_async,
                "let auto consider asynchronous schedules (pipedream, 2bw, pipemare), which change training semantics");
  cmd->add_option("--microbatch-sizes", a->explore.microbatch_sizes,
                  "micro-batch sizes to try (default: powers of two dividing --batch)")->delimiter(',');
  cmd->add_option("--microbatches", a->microbatches, "micro-batches per mini-batch (default: the planner's choice)")
      ->check(positive());
  cmd->add_flag("--no-replication", [a](int64_t) { a->explore.max_replicas = 1; },
                "plan pure pipelines: no stage on more than one device");
  cmd->add_flag("--use-all-devices", a->explore.use_all_devices,
                "only plans that occupy every device of the cluster (as `train` plans its ranks)");
  cmd->add_option("--max-blocks", a->explore.max_blocks, "plan longer chains over this many blocks of layers")
      ->check(positive())->capture_default_str();
  cmd->add_flag("--exhaustive", [a](int64_t) { a->explore.prune = false; },
                "simulate every proposal, also those whose bound (compute, ports, round trips) cannot beat the best (slower, same choice)");
  cmd->add_option("--calibration", a->calibration,
                  "time to accuracy: the update rules' calibration (train --objective time-to-accuracy caches it "
                  "beside its profile as *.calibration.json)");
  addOptions(cmd, {planner::objectiveOption(a->explore.objective, "Options", ""),
                   planner::partitionerOption(a->explore.partitioner, "Options"),
                   planner::recomputeOption(a->explore.recompute, "Options")});
  cmd->add_option("--out", a->out, "write the chosen plan JSON here");
  cmd->add_option("--report", a->report, "write an HTML report (the plan, the ranking, the predicted Gantt chart)");
  cmd->add_option("--top", a->top, "rows of the ranked table")->check(positive())->capture_default_str();
  cmd->add_flag("--json", a->json, "print the choice and the table as one JSON object");
  return {cmd, [a] { return run(*a); }};
}

}  // namespace pipetrain::cli
