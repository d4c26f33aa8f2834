// The optimizers training uses, and their per-parameter state by name: what a checkpoint
// saves beside the weights, so that it moves with its parameter to whichever stage holds
// the parameter under another plan.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/recipe/recipe.h"

namespace pipetrain::runtime {

// The optimizer of a stage's parameters `params`, named `names` (the user's names, for
// the no-decay rule; empty: all decay), at base rate `lr`, as recipe::OptimizerOptions
// says: torch::optim's Adam, AdamW or SGD, in up to two parameter groups (decayed, then
// exempt at weight decay 0; an empty group is left out). Adam's and AdamW's step on a
// GPU is fused (one kernel per parameter group), on the CPU LibTorch's own.
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const recipe::OptimizerOptions& options, double lr,
                                                       std::vector<torch::Tensor> params,
                                                       const std::vector<std::string>& names = {});

// Sets every parameter group's rate.
void setLearningRate(torch::optim::Optimizer& optimizer, double lr);

// The learning rate of a stage's optimizer step `step` (0-based, counted per stage):
// `scheduled`, the schedule's rate for it (recipe::LearningRateSchedule::rate), times
// PipeMare's T1 factor for a stage of delay `t1_delay` over `t1_warmup_steps`
// (schedule::learningRateScale; 1 for t1_delay 0, T1 off). The executor and the
// staleness replay compose the two here.
double stepRate(double scheduled, int64_t step, int t1_delay, int64_t t1_warmup_steps);

// The state `optimizer` keeps for `param` (one of its parameters), by name ("adam.step",
// "adam.exp_avg", ...; "adamw.*" alike; "sgd.momentum_buffer"); empty before its first step.
std::map<std::string, torch::Tensor> optimizerState(torch::optim::Optimizer& optimizer, const torch::Tensor& param);

// Replaces that state with `state` (as optimizerState returned it, possibly from another
// process); an empty map clears it. Throws Error when a tensor's shape differs from the
// parameter's or a name belongs to another optimizer.
void setOptimizerState(torch::optim::Optimizer& optimizer, const torch::Tensor& param,
                       const std::map<std::string, torch::Tensor>& state);

}  // namespace pipetrain::runtime
