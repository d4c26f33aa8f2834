#include "pipetrain/torch/calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "staleness_replay.h"
#include "pipetrain/util/clock.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

// What a cached calibration must share with this run for its curves to hold.
json_io::Json identityJson(const TrainConfig& c, int64_t batch, const CalibrationBudget& budget) {
  const checkpoint::Identity id = identityOf(c);
  return {{"model", id.model},       {"model_file", id.model_file}, {"model_options", c.model_config},
          {"data", id.data},         {"seed", c.seed},              {"precision", c.precision},
          {"recipe", recipe::recipeToJson(c.optimizer, c.lr, c.lr_schedule, c.clip_grad_norm)},
          {"batch", batch},          {"seconds_per_rule", budget.seconds_per_rule},
          {"evaluations", budget.evaluations}, {"held_out", budget.held_out}};
}

// The held-out loss of the model's current weights on `held_out`, in chunks of `chunk`.
double heldOutLoss(const models::Model& model, const data::Batch& held_out, int64_t chunk) {
  torch::NoGradGuard no_grad;
  const int64_t n = held_out.inputs.size(0);
  double sum = 0;
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t size = std::min(chunk, n - first);
    const torch::Tensor inputs = held_out.inputs.narrow(0, first, size).to(model.device);
    const torch::Tensor labels = held_out.labels.narrow(0, first, size).to(model.device);
    sum += models::lossOf(model, models::forwardModel(model, inputs), labels).item<double>() * static_cast<double>(size);
  }
  return sum / static_cast<double>(n);
}

// One rule's curve: `minibatches` mini-batches of the data order of `order_epoch`,
// the held-out loss at the start and after each of `evaluations` equal shares. A loss
// that is no longer finite ends the curve: the rule diverged, its best stays.
planner::LossCurve measureCurve(TrainConfig config, const plan::Plan& plan, int minibatches, int order_epoch,
                                const data::Batch& held_out, int evaluations) {
  config.plan = plan;
  models::Model model = openModel(config);
  StalenessReplay replay(config, model, minibatches, order_epoch);
  const int total = replay.totalMicrobatches();
  const int64_t chunk = std::max<int64_t>(plan.microbatch_size, 64);
  planner::LossCurve curve;
  curve.samples.push_back(0);
  curve.loss.push_back(heldOutLoss(model, held_out, chunk));
  if (!std::isfinite(curve.loss.front()))
    throw Error("calibration: the model's held-out loss before any training is " + std::to_string(curve.loss.front()) +
                ", so no progress can be measured; check the model's initial weights and the data");
  int next = 1;
  for (int j = 0; j < total; ++j) {
    replay.run(j);
    const int done = j + 1;
    if (done * static_cast<int64_t>(evaluations) < static_cast<int64_t>(next) * total) continue;
    ++next;
    replay.loadLatest();
    const double loss = heldOutLoss(model, held_out, chunk);
    if (!std::isfinite(loss)) break;
    curve.samples.push_back(done * plan.microbatch_size);
    curve.loss.push_back(loss);
  }
  return curve;
}

// What evaluating `samples` held-out samples costs: a forward pass, about a third of
// training them.
double evaluationSeconds(double seconds_per_sample, int64_t samples) {
  return seconds_per_sample / 3 * static_cast<double>(samples);
}

}  // namespace

int64_t calibrationSamples(double seconds_per_sample, int64_t batch, int64_t dataset_size,
                           const CalibrationBudget& budget) {
  const double evaluating = evaluationSeconds(seconds_per_sample, budget.evaluations * budget.held_out);
  const double training = std::max(0.0, budget.seconds_per_rule - evaluating);
  int64_t minibatches =
      seconds_per_sample > 0 ? static_cast<int64_t>(training / seconds_per_sample / static_cast<double>(batch)) : 0;
  // A power of two: trial timings that differ a little give the same number.
  minibatches = minibatches > 0 ? int64_t{1} << static_cast<int>(std::floor(std::log2(static_cast<double>(minibatches)))) : 0;
  minibatches = std::max(minibatches, budget.min_minibatches);
  minibatches = std::min(minibatches, dataset_size / batch);
  if (minibatches < 1)
    throw Error("calibration needs a mini-batch of " + std::to_string(batch) + " samples; the data has " +
                std::to_string(dataset_size));
  return minibatches * batch;
}

RuleCalibrator::RuleCalibrator(const TrainConfig& config, int64_t batch,
                               const CalibrationBudget& budget, std::string cache_path)
    : config_(config), budget_(budget), cache_path_(std::move(cache_path)) {
  const models::Model model = openModel(config);
  data::DataOptions test = config.data;
  test.split = "test";
  const auto dataset = data::openDataset(test, model.input);
  std::vector<int64_t> first;
  for (int64_t i = 0; i < std::min(budget.held_out, dataset->size()); ++i) first.push_back(i);
  if (first.empty()) throw Error("calibration needs held-out samples, and the data's test split is empty");
  held_out_ = dataset->get(first);
  calibration_.identity = identityJson(config, batch, budget);
  if (!cache_path_.empty() && std::filesystem::exists(cache_path_)) {
    try {
      planner::Calibration cached = planner::Calibration::load(cache_path_);
      if (cached.identity == calibration_.identity) calibration_ = std::move(cached);
    } catch (const Error& e) {
      std::printf("note: measuring the calibration again: the cached one is unusable (%s)\n", e.what());
    }
  }
  if (calibration_.curves.empty()) calibration_.samples = 0;  // decided by a trial of the first rule
  calibration_.seconds = 0;
}

// Times a trial mini-batch of the rule (the second of two: the first warms up) and sets
// the samples every rule trains from it.
void RuleCalibrator::decideSamples(const plan::Plan& plan) {
  TrainConfig config = config_;
  config.plan = plan;
  models::Model model = openModel(config);
  StalenessReplay replay(config, model, 2);
  const int m = plan.microbatches;
  for (int j = 0; j < m; ++j) replay.run(j);
  const auto start = std::chrono::steady_clock::now();
  for (int j = m; j < 2 * m; ++j) replay.run(j);
  const double seconds = secondsSince(start);
  training_seconds_ += seconds;
  const int64_t batch = plan.samplesPerMinibatch();
  const double per_sample = seconds / static_cast<double>(batch);
  calibration_.samples = calibrationSamples(per_sample, batch, replay.datasetSize(), budget_);
  // The budget is a floor's to exceed (at least budget.min_minibatches), and the held-out
  // evaluations cost as much as calibrationSamples prices them: the user is told the sum.
  // measureCurve evaluates before training too: evaluations + 1 times.
  const double evaluating = evaluationSeconds(per_sample, (budget_.evaluations + 1) * held_out_.inputs.size(0));
  std::printf("calibration: %lld samples per update rule, about %.1f s each (a trial mini-batch took %.3f s; %d "
              "evaluations on %lld held-out samples about %.1f s of it; smaller micro-batches take longer)\n",
              static_cast<long long>(calibration_.samples),
              per_sample * static_cast<double>(calibration_.samples) + evaluating, seconds, budget_.evaluations + 1,
              static_cast<long long>(held_out_.inputs.size(0)), evaluating);
}

void RuleCalibrator::measure(const planner::RuleToCalibrate& r, bool repeat) {
  if (calibration_.samples == 0) decideSamples(r.plan);
  const auto start = std::chrono::steady_clock::now();
  const int minibatches = static_cast<int>(calibration_.samples / r.plan.samplesPerMinibatch());
  planner::LossCurve curve = measureCurve(config_, r.plan, minibatches, repeat ? 1 : 0, held_out_, budget_.evaluations);
  const double seconds = secondsSince(start);
  training_seconds_ += seconds;
  calibration_.seconds += seconds;
  std::printf("calibrated %s%s: %lld samples in %.1f s, held-out loss %.4g -> %.4g\n", r.rule.description.c_str(),
              repeat ? " (again, on another data order)" : "", static_cast<long long>(curve.samples.back()), seconds,
              curve.loss.front(), curve.finalLoss());
  std::fflush(stdout);
  if (repeat) {
    calibration_.repeat = std::move(curve);
  } else {
    calibration_.curves[r.rule.key] = std::move(curve);
    calibration_.descriptions[r.rule.key] = r.rule.description;
  }
  // Each curve is kept as soon as it is measured: an interrupted planning keeps them.
  if (!cache_path_.empty() && calibration_.curves.count(calibration_.synchronous_key))
    json_io::writeFile(cache_path_, calibration_.toJson());
}

}  // namespace pipetrain::runtime
