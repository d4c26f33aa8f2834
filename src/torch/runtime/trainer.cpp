#include "pipetrain/torch/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <mutex>

#include "../profiler/memory_probe.h"
#include "core_probe.h"
#include "torch_trace.h"
#include "tied_gradients.h"
#include "training_recipe.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/torch/checkpoint.h"
#include "pipetrain/schedule/passes.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/staleness.h"
#include "pipetrain/util/allocator.h"
#include "pipetrain/util/core_time.h"
#include "pipetrain/util/process_memory.h"
#include "pipetrain/util/stats.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::runtime {
namespace {

// Ranks that do not read data still need the dataset's size (for the epoch length):
// the ranks that hold the dataset contribute its size, the others zero, and the sum is
// divided by the number of holders.
int64_t agreeOnSize(Coordinator& t, const data::Dataset* dataset) {
  std::vector<torch::Tensor> v{torch::full({2}, 0, torch::kLong)};
  if (dataset) {
    v[0][0] = dataset->size();
    v[0][1] = 1;
  }
  t.allReduceSum(v, t.allRanks());
  return v[0][0].item<int64_t>() / v[0][1].item<int64_t>();
}


// Names this run's checkpoints apart from an earlier run's at the same step: rank 0's
// clock, which every rank learns.
int64_t agreeOnRunId(Coordinator& t) {
  std::vector<torch::Tensor> id{torch::zeros({1}, torch::kLong)};
  if (t.rank() == 0)
    id[0][0] = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count() % 1000000000;
  t.allReduceSum(id, t.allRanks());
  return id[0][0].item<int64_t>();
}

// What a rank's run derives from its plan, once: the stage DAG, each stage's layers, the
// Program of one mini-batch (which ranks run which stages: the replicas and the devices)
// and this rank's stages. Longer Programs (trainRank's programOf) share its layout.
struct RankLayout {
  schedule::StageDag dag;
  std::vector<StageLayers> stages;
  schedule::Program one;
  std::vector<int> mine;
};

// The plan checked against the model and the job (every layer in one stage, stages that
// are convex sets of the model's layers, one rank per device), and laid out for `rank`.
// Memory is the runtime's to report, not to check here.
RankLayout layoutOf(const TrainConfig& c, int world_size, int rank, const models::Model& model) {
  const plan::Plan& p = c.plan;
  const std::vector<std::string> ranks = plan::rankDeviceNames(p);
  std::vector<cluster::Device> devices;
  for (const auto& name : ranks) {
    const bool seen = std::any_of(devices.begin(), devices.end(), [&](const cluster::Device& d) { return d.name == name; });
    if (!seen) devices.push_back({name, "cpu", 1.0, std::numeric_limits<int64_t>::max()});
  }
  if (static_cast<int>(devices.size()) != world_size)
    throw Error("the plan uses " + std::to_string(devices.size()) + " devices, but the job has " +
                std::to_string(world_size) + " ranks (--nproc or WORLD_SIZE)");
  const int n = static_cast<int>(devices.size());
  const cluster::ClusterSpec cluster(devices, {{"network", n, std::numeric_limits<double>::infinity(), 0.0}}, {},
                                     "the job's ranks");
  const graph::LayerGraph graph = model.layerGraph();
  plan::validate(p, graph, cluster, "plan");
  RankLayout layout;
  layout.stages = stageLayers(p, model);
  layout.dag = plan::stageDag(p, graph);
  layout.one = plan::programForPlan(p, layout.dag, 1);
  layout.mine = layout.one.stagesOfRank(rank);
  return layout;
}

// Inference mode for some layers (BatchNorm uses its running statistics), and back to
// training mode on the way out.
struct EvalMode {
  std::vector<torch::nn::AnyModule> modules;
  EvalMode(models::Model& model, const std::vector<StageLayers>& stages, const std::vector<int>& mine) {
    for (int s : mine)
      for (int l : stages[s].layers) {
        modules.push_back(model.layers[l].module);
        model.layers[l].module.ptr()->eval();
      }
  }
  ~EvalMode() {
    for (auto& m : modules) m.ptr()->train();
  }
};

// Test accuracy and mean loss: the test set in rounds of m micro-batches, each round the
// plan's forward-only Program (test batches travel through the same stages and replicas
// as training's). Returns {accuracy, loss} on last-stage ranks, {-1, -1} elsewhere.
// `test` is the test split on ranks that read data (null elsewhere), of `total` samples.
std::pair<double, double> evaluate(const TrainConfig& c, models::Model& model, PipelineExecutor& executor,
                                   const schedule::Program& forward_only, const std::vector<StageLayers>& stages,
                                   Coordinator& t, const data::Dataset* test, int64_t total) {
  const auto mine = executor.stagesOfRank();
  EvalMode eval_mode(model, stages, mine);
  const bool has_last = forward_only.isLastStage(mine.back());
  const int64_t b = c.plan.microbatch_size, m = forward_only.microbatches;
  EvalResult sum;
  for (int64_t round = 0; round * m * b < total; ++round) {
    auto indices = [&](int j) {
      std::vector<int64_t> idx;
      const int64_t start = (round * m + j) * b;
      for (int64_t i = start; i < start + b; ++i) idx.push_back(std::min(i, total - 1));  // pad the last batch
      return idx;
    };
    MicrobatchData feed{[&](int j) { return test->get(indices(j)).inputs; },
                        [&](int j) { return test->labels(indices(j)); },
                        [&](int j) { return std::clamp<int64_t>(total - (round * m + j) * b, 0, b); }};
    const EvalResult r = executor.evaluate(forward_only, feed);
    sum.loss_sum += r.loss_sum;
    sum.correct += r.correct;
    sum.positions += r.positions;
  }
  // Replicas of the last stage each scored their own micro-batches.
  std::vector<torch::Tensor> totals{torch::tensor({sum.loss_sum, static_cast<double>(sum.correct),
                                                   static_cast<double>(sum.positions)},
                                                  torch::kDouble)};
  t.allReduceSum(totals, t.allRanks());
  if (!has_last) return {-1, -1};
  const double positions = totals[0][2].item<double>();
  const bool classes = model.input.loss != models::LossKind::kMeanSquaredError;
  const double accuracy = classes ? totals[0][1].item<double>() / positions : -1;
  return {accuracy, totals[0][0].item<double>() / positions};
}

// Every layer's buffers (with `parameters`, its parameters too) made those of the rank
// that runs its stage for micro-batch 0, on every rank: that rank contributes its
// layers' tensors, the others zeros, summed over all (as CPU copies: the coordinator's).
void takeFromFirstReplicas(models::Model& model, const std::vector<StageLayers>& stages,
                           const schedule::Program& program, Coordinator& t, bool parameters) {
  std::vector<torch::Tensor> targets, sums;
  for (int s = 0; s < static_cast<int>(stages.size()); ++s) {
    const bool owner = program.rankOf(s, 0) == t.rank();
    for (int l : stages[s].layers) {
      const auto& module = *model.layers[l].module.ptr();
      std::vector<torch::Tensor> tensors = module.buffers();
      if (parameters) {
        const std::vector<torch::Tensor> params = module.parameters();
        tensors.insert(tensors.begin(), params.begin(), params.end());
      }
      for (const torch::Tensor& tensor : tensors) {
        targets.push_back(tensor);
        sums.push_back(owner ? tensor.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true)
                             : torch::zeros(tensor.sizes(), tensor.options().device(torch::kCPU)));
      }
    }
  }
  if (targets.empty()) return;
  t.allReduceSum(sums, t.allRanks());
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i].copy_(sums[i]);
}

// Whether a replicated stage holds buffers (batch norm's running statistics), which its
// replicas update each from their own micro-batches: they differ until made equal.
bool replicasHoldBuffers(const models::Model& model, const std::vector<StageLayers>& stages,
                         const plan::Plan& plan) {
  for (std::size_t s = 0; s < stages.size(); ++s)
    if (plan.stages[s].devices.size() > 1)
      for (int l : stages[s].layers)
        if (!model.layers[l].module.ptr()->buffers().empty()) return true;
  return false;
}

// Each (stage, type)'s mean duration, leaving out the share of its actions that the
// run's first two mini-batches ran (heap growth, first messages) when it ran more.
// The mean, not the median: a mini-batch takes the sum of its actions, slow ones
// included, and on the 2-stage mlp slow ones were not rare (docs/predictions.md, "The runs
// people start").
// `durations` holds them in the order they ran, each as its wall and its CPU time.
struct ActionDuration {
  double wall = 0, cpu = 0;
};
using ActionDurations = std::map<std::pair<int, schedule::ActionType>, std::vector<ActionDuration>>;

// The mini-batches a run's steady state leaves out first (where a run has more).
constexpr int64_t kWarmUpMinibatches = 2;

std::vector<RankResult::ActionSeconds> steadyActionSeconds(const ActionDurations& durations, int64_t minibatches) {
  std::vector<RankResult::ActionSeconds> out;
  for (const auto& [key, all] : durations) {
    const std::size_t warm_up = minibatches > kWarmUpMinibatches
                                    ? all.size() * kWarmUpMinibatches / static_cast<std::size_t>(minibatches)
                                    : 0;
    double wall = 0, cpu = 0;
    for (std::size_t i = warm_up; i < all.size(); ++i) wall += all[i].wall, cpu += all[i].cpu;
    const double n = static_cast<double>(all.size() - warm_up);
    out.push_back({key.first, key.second, wall / n, cpu / n});
  }
  return out;
}

// Each mini-batch's compute in `run` (a segment of `segment` mini-batches of `m`, after
// `before` others) into the result's per-mini-batch figures: past the warm-up, the
// latest RankResult::kPacedMinibatches only.
void recordMinibatchBusy(const RunResult& run, int m, int segment, int64_t before, RankResult& result) {
  const std::vector<int> minibatch_of = trace::minibatchOfActions(run.actions, m, segment);
  std::vector<double> wall(static_cast<std::size_t>(segment)), cpu(static_cast<std::size_t>(segment));
  for (std::size_t i = 0; i < run.actions.size(); ++i)
    if (minibatch_of[i] >= 0 && run.actions[i].action.type != schedule::ActionType::ALLREDUCE) {
      wall[static_cast<std::size_t>(minibatch_of[i])] += run.actions[i].end - run.actions[i].start;
      cpu[static_cast<std::size_t>(minibatch_of[i])] += run.action_cpu_seconds[i];
    }
  for (int k = 0; k < segment; ++k) {
    if (before + k < kWarmUpMinibatches) continue;
    result.minibatch_busy_seconds.push_back(wall[static_cast<std::size_t>(k)]);
    result.minibatch_busy_cpu_seconds.push_back(cpu[static_cast<std::size_t>(k)]);
  }
  for (auto* busy : {&result.minibatch_busy_seconds, &result.minibatch_busy_cpu_seconds})
    if (busy->size() > RankResult::kPacedMinibatches)
      busy->erase(busy->begin(), busy->end() - static_cast<long>(RankResult::kPacedMinibatches));
}

}  // namespace

namespace {

// What a model that cannot be built for want of memory needs, from LibTorch's allocator
// ("... you tried to allocate 313600000000000 bytes ..."): said as a size, next to the
// machine's memory, without the allocator's stack frames.
std::string modelTooLarge(const std::string& name, const std::string& what) {
  const std::string marker = "tried to allocate ";
  const std::size_t at = what.find(marker);
  if (at == std::string::npos || what.find("can't allocate memory") == std::string::npos)
    return "building model '" + name + "' failed: " + what.substr(0, what.find('\n'));
  const double bytes = std::strtod(what.c_str() + at + marker.size(), nullptr);
  const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  return "model '" + name + "' does not fit in this machine's memory: one of its tensors alone needs " +
         text::humanBytes(bytes) + ", and the machine has " + text::humanBytes(physical) +
         " (smaller --model-option sizes, or the model on more machines' memory)";
}

}  // namespace

models::Model openModel(const std::string& name, const models::ModelConfig& config, uint64_t seed,
                        const std::string& model_file, const data::DataOptions& data) {
  // buildModel seeds LibTorch's global generator and draws from it; ranks that are
  // threads of one process (the in-process transport) must not interleave their draws.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (model_file.empty()) {
    try {
      return models::buildModel(name, config, seed);
    } catch (const c10::Error& e) {
      throw Error(modelTooLarge(name, e.what_without_backtrace()));
    }
  }
  if (data.file.empty())
    throw Error("--model-file " + model_file + " needs --data-file: the model's input shape and loss come from the data");
  if (!config.empty()) throw Error("--model-option sizes the zoo's models; a --model-file model is sized in Python");
  return models::loadScriptedModel(model_file, data::inputSpecOf(data), name);
}

models::Model openModel(const TrainConfig& c) { return openModel(c.model, c.model_config, c.seed, c.model_file, c.data); }

namespace {

// The stream a rank's layers draw from in training (dropout, stochastic depth), seeded
// from --seed and the rank right before the first step: a run then draws the masks its
// rerun draws, whatever drew before it (the profile's timed passes, a probe), a
// recomputing plan the masks of a plan that does not recompute, and each replica masks
// of its own. LibTorch's generator keeps the seed's low 32 bits, which differ by rank.
void seedRandomStream(uint64_t seed, int rank) {
  torch::manual_seed(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(rank) + 1);
}

}  // namespace

void checkNumbers(const TrainConfig& c) {
  if (c.epochs < 1) throw Error("--epochs must be at least 1");
  if (!c.export_path.empty() && c.model_file.empty())
    throw Error("--export writes the trained model back into its TorchScript file's form; it needs --model-file");
  parsePrecision(c.precision);
  if (c.checkpoint_every < 0) throw Error("--checkpoint-every must be a positive number of mini-batches");
  if (c.checkpoint_keep < 1) throw Error("--keep-checkpoints must be at least 1");
  if (c.checkpoint_every > 0 && c.checkpoint_dir.empty()) throw Error("--checkpoint-every needs --checkpoint-dir");
}

checkpoint::Identity identityOf(const TrainConfig& c) {
  // Files by absolute path: a run resumed, or exported, from another folder finds them.
  auto absolute = [](const std::string& path) {
    return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
  };
  return {c.model, absolute(c.model_file), c.optimizer.name, c.plan.samplesPerMinibatch(), c.seed,
          c.data.file.empty() ? c.data.name : absolute(c.data.file)};
}

std::vector<StageLayers> stageLayers(const plan::Plan& plan, const models::Model& model) {
  std::map<std::string, int> index;
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l) index[model.layers[l].name] = l;
  std::vector<StageLayers> out;
  std::vector<char> placed(model.layers.size(), 0);
  for (int s = 0; s < plan.numStages(); ++s) {
    StageLayers stage;
    for (const std::string& name : plan.stages[s].layers) {
      auto it = index.find(name);
      if (it == index.end())
        throw Error("plan: stage " + std::to_string(s) + " names layer '" + name + "', which model '" + model.name +
                    "' does not have");
      if (placed[it->second]++)
        throw Error("plan: layer '" + name + "' is in two stages (again in stage " + std::to_string(s) + ")");
      stage.layers.push_back(it->second);
    }
    std::sort(stage.layers.begin(), stage.layers.end());  // the model's order is topological
    stage.recompute = plan.stages[s].recompute;
    stage.recompute_layers = plan.stages[s].recompute_layers;
    out.push_back(std::move(stage));
  }
  const auto missing = std::find(placed.begin(), placed.end(), 0);
  if (missing != placed.end())
    throw Error("plan: layer '" + model.layers[missing - placed.begin()].name + "' of model '" + model.name +
                "' is in no stage");
  // Tied copies on several stages stay equal only if every holder steps once per
  // mini-batch with the summed gradient (runtime/tied_gradients.h).
  for (const models::TiedWeight& weight : model.tied) {
    const std::vector<int> stages = holderStages(weight, out);
    const bool apart = std::any_of(stages.begin(), stages.end(), [&](int s) { return s != stages.front(); });
    if (apart && schedule::isAsynchronous(plan.schedule.name))
      throw Error("plan: layers " + models::describeHolders(model, weight) + " share a weight and sit on different "
                  "stages, which the asynchronous schedule " + plan.schedule.name + " would let drift apart; use a " +
                  "synchronous schedule (1f1b, gpipe, zb-h1, ...) or put the layers on one stage");
  }
  return out;
}

LatestWeightCorrections correctionsOf(const plan::ScheduleOptions& s) {
  return {s.pipemare_lr_warmup, s.pipemare_warmup_steps, s.pipemare_correction, s.pipemare_decay};
}

schedule::Program checkConfig(const TrainConfig& c, const models::Model& model, int world_size) {
  checkNumbers(c);
  checkRecipe(c, model);
  return layoutOf(c, world_size, 0, model).one;
}

RankResult trainRank(const TrainConfig& c, Transport& t, const std::function<void(const Progress&)>& on_progress,
                     const PipelineExecutor::WeightProbe& probe) {
  return trainRank(c, t, t, on_progress, probe);
}

RankResult trainRank(const TrainConfig& c, DataChannel& data, Coordinator& t,
                     const std::function<void(const Progress&)>& on_progress,
                     const PipelineExecutor::WeightProbe& probe) {
  const int64_t start_memory = util::residentBytes();
  if (c.threads > 0) at::set_num_threads(c.threads);
  checkNumbers(c);
  const torch::Device device = rankDevice(c.device, localRank(t.rank()));
  models::Model model = openModel(c);
  checkRecipe(c, model);
  const RankLayout layout = layoutOf(c, t.worldSize(), t.rank(), model);
  const schedule::StageDag& dag = layout.dag;
  const std::vector<StageLayers>& stages = layout.stages;
  const schedule::Program& one = layout.one;
  const std::vector<int>& mine = layout.mine;
  // On a GPU, from before the weights arrive: the peak holds them, the optimizer's state,
  // the activations and the messages.
  std::optional<profiler::MemoryProbe> device_memory;
  if (!device.is_cpu()) device_memory.emplace(device);
  models::moveTo(model, device);

  RankResult result;
  result.rank = t.rank();
  result.stages = mine;
  const bool loads_input = std::any_of(mine.begin(), mine.end(), [&](int s) { return readsModelInput(model, stages[s]); });
  result.last_stage = one.isLastStage(mine.back());
  const bool reports = result.last_stage && one.rankOf(one.num_stages - 1, 0) == t.rank();
  std::unique_ptr<data::Dataset> train, test;
  const int64_t before_data = util::residentBytes();
  if (loads_input || result.last_stage) train = data::openDataset(c.data, model.input);
  const int64_t size = agreeOnSize(t, train.get());
  // Opened once for every epoch's evaluation (a user's file is read whole).
  int64_t test_size = 0;
  if (c.evaluate) {
    data::DataOptions options = c.data;
    options.split = "test";
    if (loads_input || result.last_stage) test = data::openDataset(options, model.input);
    test_size = agreeOnSize(t, test.get());
  }
  if (train || test) result.data_memory_bytes = std::max<int64_t>(0, util::residentBytes() - before_data);
  const int64_t b = c.plan.microbatch_size;
  const int m = c.plan.microbatches;
  int64_t steps = data::sampleOrder(c.data, nullptr, size, c.seed, 0).minibatchesPerEpoch(b, m);
  if (c.max_steps_per_epoch >= 0) steps = std::min(steps, c.max_steps_per_epoch);
  if (steps == 0)
    throw Error("the training data has " + std::to_string(size) + " samples, fewer than one mini-batch of " +
                std::to_string(b * m) + " (" + std::to_string(m) + " x " + std::to_string(b) +
                "): a smaller --batch, or more data");

  // Between checkpoints an epoch runs as one Program of that many mini-batches (cached
  // by length: at most the interval's and the epoch's remainder).
  std::map<int64_t, schedule::Program> programs;
  auto programOf = [&](int64_t minibatches) -> const schedule::Program& {
    auto it = programs.find(minibatches);
    if (it == programs.end())
      it = programs.emplace(minibatches, plan::programForPlan(c.plan, dag, static_cast<int>(minibatches))).first;
    return it->second;
  };
  const schedule::Program forward_only = schedule::forwardOnly(one);
  PipelineExecutor executor(
      one, t.rank(), model, stages, b, data,
      [&](int s, std::vector<torch::Tensor> p) { return optimizerOf(c, model, stages[s].layers, std::move(p)); },
      correctionsOf(c.plan.schedule), parsePrecision(c.precision), stepRecipe(c, one, c.epochs * steps));
  if (probe) executor.setWeightProbe(probe);
  result.stage_output_bytes = executor.stageOutputBytes();
  result.stage_preds = one.stage_preds;
  for (const auto& stage : stages) {
    int64_t bytes = 0;
    for (const auto& p : model.parameters(stage.layers)) bytes += p.numel() * p.element_size();
    result.stage_param_bytes.push_back(bytes);
  }

  const RankState rank_state{t.rank(), model, stages, one, executor};
  const checkpoint::Identity identity = identityOf(c);
  checkpoint::Position position;
  seedRandomStream(c.seed, t.rank());  // a resumed run's checkpoint then restores its stream
  if (!c.resume.empty()) {
    const Checkpoint from = findCheckpoint(c.resume, "--resume");
    loadCheckpoint(from, identity, c.plan, rank_state);
    position = from.manifest.position;
    checkEpochsLeft(from, c.epochs);
  }
  const int64_t run_id = c.checkpoint_dir.empty() ? 0 : agreeOnRunId(t);
  auto save = [&] {
    if (!c.checkpoint_dir.empty())
      saveCheckpoint(c.checkpoint_dir, run_id, c.checkpoint_keep, position, identity, c.plan, rank_state, t);
  };

  ActionDurations durations;
  int64_t minibatches_run = 0;
  // The core's speed, probed between steps (runtime/core_probe.h), often enough to follow
  // it and rarely enough to cost nothing: a short probe, at most each half second (its
  // cost: docs/predictions.md, "The runtime's own time").
  std::vector<double> probes;
  Clock::time_point last_probe{};
  auto probeCore = [&] {
    if (!device.is_cpu() || Clock::now() - last_probe < std::chrono::milliseconds(500)) return;
    probes.push_back(coreProbeSeconds());
    last_probe = Clock::now();
  };
  TorchTrace trace(c.torch_trace.empty() ? "" : c.torch_trace + ".rank" + std::to_string(t.rank()) + ".json",
                   kTraceAfterSteps, 2);
  const Clock::time_point origin = sharedOrigin(t);
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  for (int epoch = position.epoch; epoch < c.epochs; ++epoch) {
    const data::SampleOrder order = data::sampleOrder(c.data, train.get(), size, c.seed, epoch);
    while (position.step < steps) {
      const int64_t from = position.step;
      const int64_t end = c.checkpoint_every > 0 ? std::min(steps, (from / c.checkpoint_every + 1) * c.checkpoint_every)
                                                 : steps;
      auto indices = [&](int j) { return order.microbatch(from + j / m, j % m, b, m); };
      MicrobatchData feed{[&](int j) { return train->get(indices(j)).inputs; },
                          [&](int j) { return train->labels(indices(j)); }, {}};
      const auto segment_start = Clock::now();
      const util::ThreadCoreTime core_time_before = util::threadCoreTime();
      const double segment_began = std::chrono::duration<double>(segment_start - origin).count();
      const schedule::Program& program = programOf(end - from);
      RunResult r = executor.run(program, feed, origin, [&](int k, double loss, double ended, double grad_norm) {
        probeCore();
        trace.stepDone(minibatches_run + k + 1);
        if (!std::isnan(loss)) result.final_loss = loss;
        if (c.clip_grad_norm > 0) result.grad_norms.push_back(grad_norm);
        // As of when mini-batch k ended, not when it was reported (a mini-batch later).
        if (on_progress)
          on_progress({epoch, from + k + 1, steps, result.final_loss, grad_norm,
                       (result.samples + (k + 1) * m * b) /
                           std::max(result.train_seconds + ended - segment_began, 1e-9),
                       ended, reports});
      });
      result.train_seconds += since(segment_start);
      const util::ThreadCoreTime core_time = util::threadCoreTime();
      if (core_time_before.waiting_seconds >= 0 && result.core_wait_seconds >= 0) {
        result.core_wait_seconds += core_time.waiting_seconds - core_time_before.waiting_seconds;
        result.core_run_seconds += core_time.running_seconds - core_time_before.running_seconds;
      } else {
        result.core_wait_seconds = result.core_run_seconds = -1;
      }
      for (std::size_t i = 0; i < r.actions.size(); ++i) {
        const trace::TimedAction& a = r.actions[i];
        // Compute as the simulator's timeline counts it (trace::Timeline::busySeconds):
        // waiting for the replicas' all-reduce is its own share of the step.
        (a.action.type == schedule::ActionType::ALLREDUCE ? result.allreduce_seconds : result.busy_seconds) +=
            a.end - a.start;
        durations[{a.action.stage, a.action.type}].push_back({a.end - a.start, r.action_cpu_seconds[i]});
      }
      minibatches_run += end - from;
      result.wait_seconds += r.wait_seconds;
      result.actions_run += static_cast<int64_t>(program.ranks[static_cast<std::size_t>(t.rank())].size());
      result.max_sends_held = std::max(result.max_sends_held, r.max_sends_held);
      result.samples += (end - from) * m * b;
      const int segment = static_cast<int>(end - from);
      const int kept_from = std::max(0, segment - static_cast<int>(RankResult::kRecentMinibatches));
      recordMinibatchBusy(r, m, segment, minibatches_run - segment, result);
      for (auto& minibatch : trace::splitMinibatches(r.actions, m, kept_from, segment))
        result.recent_steps.push_back(std::move(minibatch));
      if (const std::size_t n = result.recent_steps.size(); n > RankResult::kRecentMinibatches)
        result.recent_steps.erase(result.recent_steps.begin(),
                                  result.recent_steps.begin() + static_cast<long>(n - RankResult::kRecentMinibatches));
      position.step = end;
      position.minibatches += end - from;
      if (end < steps) save();
    }
    position = {epoch + 1, 0, position.minibatches};
    if (c.evaluate) {
      // Every replica evaluates with the first replica's buffers, those the exported model
      // and checkpoints keep: as DDP, which broadcasts rank 0's buffers.
      if (replicasHoldBuffers(model, stages, c.plan)) takeFromFirstReplicas(model, stages, one, t, false);
      const auto [accuracy, loss] = evaluate(c, model, executor, forward_only, stages, t, test.get(), test_size);
      result.test_accuracy = accuracy;
      result.test_loss = loss;
      if (result.last_stage) {
        // Samples trained by the whole run, the checkpoints it resumed from included, so
        // that a restarted run's curve goes on where it was (its time is this start's).
        result.history.push_back({epoch + 1, position.minibatches * m * b, result.train_seconds, since(origin),
                                  accuracy, loss});
        if (on_progress)
          on_progress({epoch, steps, steps, result.final_loss, NAN, result.samples / std::max(result.train_seconds, 1e-9),
                       since(origin), reports, &result.history.back()});
      }
    }
    save();
  }
  if (device_memory) result.peak_device_memory_bytes = device_memory->peak();
  result.device = describeDevice(device);
  result.data_channel = data.name();
  result.heap = util::heapName();
  result.sums_in_shared_memory = data.sumsInSharedMemory();
  if (!c.export_path.empty()) {
    models::moveTo(model, torch::kCPU);  // a file any machine loads
    takeFromFirstReplicas(model, stages, one, t, /*parameters=*/true);
    if (t.rank() == 0) models::saveScriptedModel(model, c.export_path);
  }
  result.action_seconds = steadyActionSeconds(durations, minibatches_run);
  result.peak_memory_bytes = util::peakResidentBytes();
  result.heap_free_bytes = util::heapFreeBytes();
  result.probe_seconds = util::median(probes);
  result.start_memory_bytes = start_memory;
  result.parameters = executor.parameters();
  result.weight_bytes = 0;
  for (const StageWeights& w : executor.weights()) {
    result.weight_versions = std::max(result.weight_versions, w.peak_versions);
    result.weight_bytes += w.param_bytes * (w.peak_versions + w.extra_buffers);
  }
  return result;
}

}  // namespace pipetrain::runtime
