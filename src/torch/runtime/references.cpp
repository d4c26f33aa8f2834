// The single-process references pipelined training is held to (trainer.h): the same
// training without pipelining, and a schedule's staleness rule replayed.
#include <algorithm>

#include "gradient_clipping.h"
#include "optimizer_state.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/torch/trainer.h"
#include "staleness_replay.h"
#include "training_recipe.h"

namespace pipetrain::runtime {

models::Model trainReference(const TrainConfig& c) {
  models::Model model = openModel(c);
  models::moveTo(model, rankDevice(c.device, 0));
  const Precision precision = parsePrecision(c.precision);
  const std::vector<int> all = allLayers(model);
  const std::vector<torch::Tensor> params = model.parameters(all);
  auto optimizer = optimizerOf(c, model, all, params);
  std::vector<torch::Tensor> counted;  // a tied weight's copies once
  const std::vector<torch::Tensor> later = models::laterTiedCopies(model);
  for (const torch::Tensor& p : params)
    if (std::none_of(later.begin(), later.end(), [&](const torch::Tensor& copy) { return p.is_same(copy); }))
      counted.push_back(p);
  auto train = data::openDataset(c.data, model.input);
  const data::SampleOrder order = data::sampleOrder(c.data, train.get(), train->size(), c.seed, 0);
  const int64_t b = c.plan.microbatch_size;
  const int m = c.plan.microbatches;
  for (int64_t k = 0; k < c.max_steps_per_epoch; ++k) {
    std::vector<int64_t> idx;
    for (int j = 0; j < m; ++j) {
      const auto mb = order.microbatch(k, j, b, m);
      idx.insert(idx.end(), mb.begin(), mb.end());
    }
    const data::Batch batch = train->get(idx);
    optimizer->zero_grad();
    torch::Tensor loss;
    {
      AutocastScope autocast(precision, model.device);
      loss = models::lossOf(model, models::forwardModel(model, batch.inputs.to(model.device)),
                            batch.labels.to(model.device));
    }
    loss.backward();
    models::sumTiedGradients(model);
    if (c.clip_grad_norm > 0) clipGradients(params, counted, c.clip_grad_norm);
    setLearningRate(*optimizer, c.lr_schedule.rate(c.lr, k, c.max_steps_per_epoch));
    optimizer->step();
  }
  return model;
}

models::Model trainStalenessReference(const TrainConfig& c) {
  models::Model model = openModel(c);
  StalenessReplay replay(c, model, static_cast<int>(c.max_steps_per_epoch));
  for (int j = 0; j < replay.totalMicrobatches(); ++j) replay.run(j);
  replay.loadLatest();
  return model;
}

}  // namespace pipetrain::runtime
