#include "pipetrain/torch/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <mutex>

#include "pipetrain/plan/partition.h"
#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

// Tag for the split rank 0 sends to everyone before training: above every message tag.
constexpr uint32_t kSplitTag = 0x7ffffff0u;

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const TrainConfig& c, std::vector<torch::Tensor> params) {
  if (c.optimizer == "adam") return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(c.lr));
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(c.lr).momentum(c.momentum));
}

// buildModel seeds LibTorch's global generator and draws from it; ranks that are threads
// of one process (the in-process transport) must not interleave their draws.
models::Model buildModelExclusively(const TrainConfig& c) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  return models::buildModel(c.model, c.model_config, c.seed);
}

int64_t peakResidentBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// Rank 0 measures layer costs and splits the chain; the others receive its answer, so a
// noisy measurement can never give two ranks different splits.
std::vector<int> agreeOnSplit(const TrainConfig& c, models::Model& model, int stages, Transport& t) {
  std::vector<int> bounds = c.stage_bounds;
  if (bounds.empty() && t.rank() == 0) {
    // Costs at the real micro-batch size: at batch size 1 they were too far from the
    // real ones (a 39% bubble on the first of two CNN stages).
    profiler::ProfileOptions quick;
    quick.warmup = 1;
    quick.repeats = 3;
    const graph::LayerGraph profile = profiler::profileModel(model, c.microbatch_size, quick);
    std::vector<double> costs;
    for (const auto& l : profile.layers()) costs.push_back(l.forward_seconds + l.backwardSeconds());
    bounds = plan::balancedChainSplit(costs, stages);
  }
  if (!c.stage_bounds.empty() || t.worldSize() == 1) return bounds;
  torch::Tensor wire = torch::zeros({stages + 1}, torch::kLong);
  if (t.rank() == 0) {
    for (int i = 0; i <= stages; ++i) wire[i] = bounds[i];
    for (int r = 1; r < t.worldSize(); ++r) t.send(wire, r, kSplitTag)->wait();
    return bounds;
  }
  t.recv(wire, 0, kSplitTag)->wait();
  bounds.clear();
  for (int i = 0; i <= stages; ++i) bounds.push_back(static_cast<int>(wire[i].item<int64_t>()));
  return bounds;
}

std::vector<int> allRanks(const Transport& t) {
  std::vector<int> ranks;
  for (int r = 0; r < t.worldSize(); ++r) ranks.push_back(r);
  return ranks;
}

// Ranks that do not read data still need the dataset's size (for the epoch length):
// the ranks that hold the dataset contribute its size, the others zero, and the sum is
// divided by the number of holders.
int64_t agreeOnSize(Transport& t, const data::Dataset* dataset) {
  std::vector<torch::Tensor> v{torch::full({2}, 0, torch::kLong)};
  if (dataset) {
    v[0][0] = dataset->size();
    v[0][1] = 1;
  }
  t.allReduceSum(v, allRanks(t));
  return v[0][0].item<int64_t>() / v[0][1].item<int64_t>();
}

// Forward-only pass over the test set, stage by stage in increasing order on every rank
// (a global order, so no deadlock); the last stage counts correct predictions.
double evaluate(const TrainConfig& c, models::Model& model, const schedule::Program& program,
                const std::vector<StageLayers>& stages, const std::vector<std::vector<int64_t>>& shapes,
                Transport& t) {
  torch::NoGradGuard no_grad;
  data::DataOptions options = c.data;
  options.split = "test";
  const auto mine = program.stagesOfRank(t.rank());
  // Inference mode for the rank's layers (BatchNorm uses its running statistics), and
  // back to training mode on the way out.
  struct EvalMode {
    std::vector<torch::nn::AnyModule> modules;
    ~EvalMode() {
      for (auto& m : modules) m.ptr()->train();
    }
  } eval_mode;
  for (int s : mine)
    for (int l = stages[s].first; l < stages[s].last; ++l) {
      eval_mode.modules.push_back(model.layers[l].module);
      model.layers[l].module.ptr()->eval();
    }
  const bool has_first = program.isFirstStage(mine.front());
  const bool has_last = program.isLastStage(mine.back());
  std::unique_ptr<data::Dataset> test;
  if (has_first || has_last) test = data::openDataset(options, model.input);
  const int64_t b = c.microbatch_size;
  const int64_t total = agreeOnSize(t, test.get());
  int64_t correct = 0;
  for (int64_t start = 0; start < total; start += b) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < start + b; ++i) idx.push_back(std::min(i, total - 1));  // pad the last batch
    // The test batch travels like micro-batch `slot`: through that slot's replicas.
    const int slot = static_cast<int>((start / b) % program.microbatches);
    torch::Tensor x;
    for (int s : mine) {
      if (program.rankOf(s, slot) != t.rank()) continue;
      if (program.isFirstStage(s)) {
        x = test->get(idx).inputs;
      } else {
        const int q = program.stage_preds[s][0];
        if (program.rankOf(q, slot) != t.rank()) {
          x = torch::empty(shapes[q]);
          t.recv(x, program.rankOf(q, slot), messageTag(false, q, s, slot, program.num_stages, program.microbatches))
              ->wait();
        }
      }
      x = models::forwardRange(model, stages[s].first, stages[s].last, x);
      if (program.isLastStage(s)) {
        torch::Tensor labels = test->labels(idx);
        torch::Tensor hits = x.argmax(-1).eq(labels);  // (b) or (b, T)
        const int64_t valid = std::min<int64_t>(b, total - start);
        correct += hits.narrow(0, 0, valid).sum().item<int64_t>();
      } else {
        const int next = program.stage_succs[s][0];
        if (program.rankOf(next, slot) != t.rank())
          t.send(x, program.rankOf(next, slot),
                 messageTag(false, s, next, slot, program.num_stages, program.microbatches))
              ->wait();
      }
    }
  }
  // Replicas of the last stage each counted their own slots.
  std::vector<torch::Tensor> hits{torch::full({1}, correct, torch::kLong)};
  t.allReduceSum(hits, allRanks(t));
  correct = hits[0].item<int64_t>();
  if (!has_last) return -1;
  const int64_t per_sample = model.input.kind == models::InputKind::kTokens ? model.input.sample_shape[0] : 1;
  return static_cast<double>(correct) / (total * per_sample);
}

}  // namespace

schedule::Program checkConfig(const TrainConfig& c, int world_size) {
  schedule::checkScheduleName(c.schedule);
  if (schedule::isAsynchronous(c.schedule))
    throw Error("schedule \"" + c.schedule + "\" is asynchronous; the runtime trains with the synchronous schedules "
                "(gpipe, 1f1b, interleaved, zb-h1) so far");
  if (c.microbatches < 1) throw Error("--microbatches must be at least 1");
  if (c.microbatch_size < 1) throw Error("--microbatch-size must be at least 1");
  if (c.epochs < 1) throw Error("--epochs must be at least 1");
  if (c.optimizer != "adam" && c.optimizer != "sgd") throw Error("--optimizer must be adam or sgd");
  if (c.lr <= 0) throw Error("--lr must be positive");
  int stages = world_size * (c.schedule == "interleaved" ? c.chunks : 1);
  if (!c.stage_replicas.empty()) {
    int ranks = 0;
    for (int r : c.stage_replicas) {
      if (r < 1) throw Error("every stage needs at least one replica");
      ranks += r;
    }
    if (ranks != world_size)
      throw Error("the plan's stages have " + std::to_string(ranks) + " replicas in all, but the job has " +
                  std::to_string(world_size) + " ranks");
    if (c.schedule == "interleaved") throw Error("interleaved stages cannot have replicas");
    stages = static_cast<int>(c.stage_replicas.size());
  }
  if (!c.stage_bounds.empty() && static_cast<int>(c.stage_bounds.size()) != stages + 1)
    throw Error("the plan has " + std::to_string(c.stage_bounds.size() - 1) + " stages but " +
                std::to_string(world_size) + " ranks run " + std::to_string(stages));
  // The schedule must accept these numbers (e.g. interleaved: m divisible by ranks).
  const int chunks = c.schedule == "interleaved" ? c.chunks : 1;
  schedule::ScheduleSpec spec{c.schedule, c.microbatches, 1, chunks, false};
  schedule::Program program = schedule::buildProgram(spec, schedule::chainDag(stages), c.stage_replicas);
  schedule::validate(program);
  return program;
}

RankResult trainRank(const TrainConfig& c, Transport& t, const std::function<void(const Progress&)>& on_progress) {
  const schedule::Program program = checkConfig(c, t.worldSize());
  const int num_stages = program.num_stages;
  if (c.threads > 0) at::set_num_threads(c.threads);
  models::Model model = buildModelExclusively(c);
  if (!c.stage_bounds.empty() && c.stage_bounds.back() != static_cast<int>(model.layers.size()))
    throw Error("the plan's stages cover " + std::to_string(c.stage_bounds.back()) + " layers, model \"" + c.model +
                "\" has " + std::to_string(model.layers.size()));

  RankResult result;
  result.rank = t.rank();
  result.stage_bounds = agreeOnSplit(c, model, num_stages, t);
  std::vector<StageLayers> stages;
  for (int s = 0; s < num_stages; ++s) stages.push_back({result.stage_bounds[s], result.stage_bounds[s + 1]});

  PipelineExecutor executor(program, t.rank(), model, stages, c.microbatch_size, t,
                            [&](std::vector<torch::Tensor> p) { return makeOptimizer(c, std::move(p)); });
  result.stages = executor.stagesOfRank();
  for (const auto& shape : executor.stageOutputShapes())
    result.stage_output_bytes.push_back(4 * c10::multiply_integers(shape));
  for (const auto& stage : stages) {
    int64_t bytes = 0;
    for (const auto& p : model.parameters(stage.first, stage.last)) bytes += p.numel() * p.element_size();
    result.stage_param_bytes.push_back(bytes);
  }
  const bool first = program.isFirstStage(result.stages.front());
  result.last_stage = program.isLastStage(result.stages.back());

  std::unique_ptr<data::Dataset> train;
  if (first || result.last_stage) train = data::openDataset(c.data, model.input);
  const int64_t size = agreeOnSize(t, train.get());

  t.barrier();
  const Clock::time_point origin = Clock::now();
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    const data::SampleOrder order(size, c.seed, epoch);
    int64_t steps = order.minibatchesPerEpoch(c.microbatch_size, c.microbatches);
    if (c.max_steps_per_epoch >= 0) steps = std::min(steps, c.max_steps_per_epoch);
    if (steps == 0) throw Error("the dataset has fewer samples than one mini-batch");
    for (int64_t k = 0; k < steps; ++k) {
      auto indices = [&](int j) { return order.microbatch(k, j, c.microbatch_size, c.microbatches); };
      MicrobatchData feed{[&](int j) { return train->get(indices(j)).inputs; },
                          [&](int j) { return train->labels(indices(j)); }};
      const auto start = Clock::now();
      MinibatchResult r = executor.runMinibatch(feed, origin);
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      result.train_seconds += elapsed;
      for (const auto& a : r.actions) result.busy_seconds += a.end - a.start;
      result.wait_seconds += r.wait_seconds;
      result.samples += c.microbatch_size * c.microbatches;
      if (r.has_loss) result.final_loss = r.loss;
      result.last_step = std::move(r.actions);
      if (on_progress)
        on_progress({epoch, k + 1, steps, result.final_loss, result.samples / std::max(result.train_seconds, 1e-9)});
    }
    if (c.evaluate) result.test_accuracy = evaluate(c, model, program, stages, executor.stageOutputShapes(), t);
  }
  result.peak_memory_bytes = peakResidentBytes();
  result.parameters = executor.parameters();
  return result;
}

models::Model trainReference(const TrainConfig& c) {
  models::Model model = buildModelExclusively(c);
  auto optimizer = makeOptimizer(c, model.parameters(0, static_cast<int>(model.layers.size())));
  auto train = data::openDataset(c.data, model.input);
  const data::SampleOrder order(train->size(), c.seed, 0);
  for (int64_t k = 0; k < c.max_steps_per_epoch; ++k) {
    std::vector<int64_t> idx;
    for (int j = 0; j < c.microbatches; ++j) {
      const auto mb = order.microbatch(k, j, c.microbatch_size, c.microbatches);
      idx.insert(idx.end(), mb.begin(), mb.end());
    }
    const data::Batch batch = train->get(idx);
    optimizer->zero_grad();
    torch::Tensor out = models::forwardRange(model, 0, static_cast<int>(model.layers.size()), batch.inputs);
    models::lossOf(model, out, batch.labels).backward();
    optimizer->step();
  }
  return model;
}

}  // namespace pipetrain::runtime
