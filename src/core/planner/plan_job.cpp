#include "pipetrain/planner/plan_job.h"

#include "pipetrain/planner/planner_options.h"
#include "pipetrain/planner/profile_fit.h"
#include "pipetrain/planner/time_to_target.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner {
namespace {

// A calibration file `train --objective time-to-accuracy` wrote: the rules it holds are
// known, the others are left unmeasured (the ranking lists them after the others).
class CalibrationFile : public Calibrator {
 public:
  CalibrationFile(std::string path, int64_t batch)
      : path_(std::move(path)), batch_(batch), calibration_(Calibration::load(path_)),
        measured_synchronous_(calibration_.synchronous_key) {}
  Calibration& calibration() override { return calibration_; }
  void measure(const RuleToCalibrate& rule, bool repeat) override {
    const std::string again = "; calibrate at this batch (train --batch " + std::to_string(batch_) +
                              " --objective time-to-accuracy --allow-async)";
    if (repeat) throw Error(path_ + " holds no second run of the synchronous rule (an interrupted calibration)" + again);
    if (rule.rule.synchronous)
      throw Error(path_ + " holds no curve of '" + rule.rule.key + "': it calibrated '" + measured_synchronous_ + "'" +
                  again);
    // An asynchronous rule the file lacks stays uncalibrated: no curve, no estimate.
  }

 private:
  std::string path_;
  int64_t batch_;
  Calibration calibration_;
  std::string measured_synchronous_;
};

}  // namespace

std::vector<options::Option> planOptions(PlanRequest& r) {
  using options::Option;
  ExploreOptions& e = r.explore;
  const std::string group = "Options";
  return {
      Option{"graph", group, "layer graph JSON (from `pipetrain profile`)", &r.graph}.needed(),
      Option{"cluster", group, "cluster spec JSON", &r.cluster}.needed(),
      Option{"batch", group, "samples per optimizer step", &e.global_batch}.needed().positive(),
      Option{"schedule", group, "auto (explore all) or one schedule name", &e.schedule}.shown(),
      {"allow-async", group,
       "let auto consider asynchronous schedules (pipedream, 2bw, pipemare), which change training semantics",
       &e.allow_async},
      Option{"microbatch-sizes", group, "micro-batch sizes to try (default: powers of two dividing --batch)",
             &e.microbatch_sizes}
          .repeated(),
      Option{"microbatches", group, "micro-batches per mini-batch (default: the planner's choice)", &r.microbatches}
          .positive(),
      {"no-replication", group, "plan pure pipelines: no stage on more than one device",
       std::function<void()>([&e] { e.max_replicas = 1; })},
      {"use-all-devices", group, "only plans that occupy every device of the cluster (as `train` plans its ranks)",
       &e.use_all_devices},
      Option{"max-blocks", group, "plan longer chains over this many blocks of layers", &e.max_blocks}
          .positive()
          .shown(),
      {"exhaustive", group,
       "simulate every proposal, also those whose bound (compute, ports, round trips) cannot beat the best (slower, "
       "same choice)",
       std::function<void()>([&e] { e.prune = false; })},
      objectiveOption(e.objective, group, ""),
      {"calibration", group,
       "time to accuracy: the update rules' calibration (train --objective time-to-accuracy caches it beside its "
       "profile as *.calibration.json)",
       &r.calibration},
      partitionerOption(e.partitioner, group),
      recomputeOption(e.recompute, group),
  };
}

PlannedFromFiles planFromFiles(PlanRequest a) {
  if (a.graph.empty() || a.cluster.empty()) throw Error("plan needs --graph and --cluster");
  if (a.explore.global_batch <= 0) throw Error("plan needs --batch: the samples per optimizer step");
  PlannedFromFiles out;
  out.graph = graph::LayerGraph::load(a.graph);
  ProfileFit fit = fitProfileToCluster(out.graph, cluster::ClusterSpec::load(a.cluster));
  out.cluster = std::move(fit.cluster);
  out.note = std::move(fit.note);
  ExploreOptions& o = a.explore;
  if (a.microbatches > 0) {
    if (!o.microbatch_sizes.empty()) throw Error("give --microbatches or --microbatch-sizes, not both");
    if (o.global_batch % a.microbatches != 0)
      throw Error("--microbatches " + std::to_string(a.microbatches) + " does not divide --batch " +
                  std::to_string(o.global_batch));
    o.microbatch_sizes = {o.global_batch / a.microbatches};
  }
  const std::string objective = o.objective->name();
  if (o.objective->needsCalibrator() && a.calibration.empty())
    throw Error("--objective " + objective + " needs --calibration FILE: the update rules' progress per sample, as "
                "`pipetrain train --objective " + objective + " --allow-async` measures and caches it beside its "
                "profile (*.calibration.json)");
  if (!a.calibration.empty() && !o.objective->needsCalibrator())
    throw Error("--calibration is not read under --objective " + objective);
  std::unique_ptr<CalibrationFile> file;
  ObjectiveInputs inputs;
  if (!a.calibration.empty()) {
    file = std::make_unique<CalibrationFile>(a.calibration, o.global_batch);
    inputs.calibrator = [&file]() -> Calibrator& { return *file; };
  }
  out.exploration = explore(out.graph, out.cluster, o, inputs);
  return out;
}

}  // namespace pipetrain::planner
