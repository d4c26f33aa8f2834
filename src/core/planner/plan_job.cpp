#include "pipetrain/planner/plan_job.h"

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

PlannedFromFiles planFromFiles(PlanRequest a) {
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
