// The config's recipe (TrainConfig's optimizer, lr, lr_schedule and clip_grad_norm) made
// into what training runs: a stage's optimizer over its layers' parameters, and the
// executor's StepRecipe. The trainer, its single-process reference and the staleness
// replay take them from here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/schedule/program.h"
#include "pipetrain/torch/executor.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/trainer.h"

namespace pipetrain::runtime {

// 0, 1, ..., the model's last layer.
std::vector<int> allLayers(const models::Model& model);

// The optimizer of `params`, the parameters of `layers` (Model::parameters' order), named
// for the no-decay rule.
std::unique_ptr<torch::optim::Optimizer> optimizerOf(const TrainConfig& config, const models::Model& model,
                                                     const std::vector<int>& layers, std::vector<torch::Tensor> params);

// The clipping rule of `schedule` (executor.h, StepRecipe): the whole model's norm under
// a synchronous schedule, each stage's own under an asynchronous one.
bool clipsWholeModel(const std::string& schedule);

// Each stage's rate, over its own steps in a run of `minibatches` mini-batches of
// `one_minibatch`'s shape, and the clipping.
StepRecipe stepRecipe(const TrainConfig& config, const schedule::Program& one_minibatch, int64_t minibatches);

}  // namespace pipetrain::runtime
