// The optimizers training uses, and their per-parameter state by name: what a checkpoint
// saves beside the weights, so that it moves with its parameter to whichever stage holds
// the parameter under another plan.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace pipetrain::runtime {

// "adam" or "sgd" (with `momentum`). Adam's step on a GPU is fused (one kernel per
// parameter group), on the CPU LibTorch's own.
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& name, double lr, double momentum,
                                                       std::vector<torch::Tensor> params);

// The learning rate of a stage's optimizer step `step` (0-based, counted per stage):
// `lr` times the linear warm-up's factor over `warmup_steps` steps ((step + 1) /
// warmup_steps until it reaches 1; none for 0 steps), times PipeMare's T1 factor for a
// stage of delay `t1_delay` over `t1_warmup_steps` (schedule::learningRateScale; 1 for
// t1_delay 0, T1 off). Training, its references and the staleness replay all take their
// rates from here.
double stepRate(double lr, int64_t step, int64_t warmup_steps, int t1_delay = 0, int64_t t1_warmup_steps = 0);

// The state `optimizer` keeps for `param` (one of its parameters), by name ("adam.step",
// "adam.exp_avg", ...; "sgd.momentum_buffer"); empty before its first step.
std::map<std::string, torch::Tensor> optimizerState(torch::optim::Optimizer& optimizer, const torch::Tensor& param);

// Replaces that state with `state` (as optimizerState returned it, possibly from another
// process); an empty map clears it. Throws Error when a tensor's shape differs from the
// parameter's or a name belongs to another optimizer.
void setOptimizerState(torch::optim::Optimizer& optimizer, const torch::Tensor& param,
                       const std::map<std::string, torch::Tensor>& state);

}  // namespace pipetrain::runtime
