// What one stage holds on its rank, the two things done to its weights (running a
// pass on the version an action names, and stepping the optimizer into the next one),
// and the state a checkpoint keeps beside them.
//
// The current version lives in the model's parameters; a version that a later action
// still reads is stashed (a copy of the weights only, never of optimizer state) at the
// STEP that replaces it, and swapped into the parameters' storage for the passes that
// read it. The optimizer updates the parameters through aliases that autograd does not
// track, so a backward pass after a STEP reads whatever the storage holds when it runs.
// The executor decides which version each action reads (the Program says); this file
// only keeps them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gradient_buckets.h"

namespace pipetrain::runtime {

// Everything one stage of a rank holds, on the stage's device: its weights, its
// optimizer, T2's buffers and, where the stage is replicated, its gradient buckets.
struct StageState {
  explicit StageState(torch::Device on) : device(on) {}
  torch::Device device;
  std::vector<torch::Tensor> params;                     // the model's parameters
  std::vector<torch::Tensor> aliases;                    // the same storage, untracked: what the optimizer updates
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  double base_lr = 0;                                    // its rate as made: where no schedule gives one
  int version = 0;                                       // current, counted within one run
  std::map<int, std::vector<torch::Tensor>> stash;       // older versions still read
  int peak_versions = 1;
  int64_t steps_taken = 0;                               // over the whole training (T1's k)
  std::vector<torch::Tensor> velocity;                   // T2's delta
  std::vector<torch::Tensor> corrected;                  // T2's w - tau * delta
  std::unique_ptr<GradientBuckets> buckets;              // replicated stages
};

// Runs `compute` with the stage's parameters holding weight version `version`: the
// current one, or a stashed one swapped in for the call. With `t2_steps` > 0 (PipeMare's
// T2, on the current version) it runs on w - t2_steps x velocity instead, an estimate of
// the weights of that many steps ago. `what()` names the action in the error when the
// version is neither current nor stashed.
void withVersion(StageState& stage, int version, int t2_steps, const std::function<std::string()>& what,
                 const std::function<void()>& compute);

struct StepOptions {
  bool stash_old = false;         // a later action reads the version this step replaces
  double gradient_factor = 1.0;   // rescales the accumulated gradients first
  std::optional<double> lr;       // the rate for this step (the schedule's, T1)
  torch::Tensor clip;             // defined: multiplies the gradients after gradient_factor (clipping)
  std::optional<double> t2_decay; // T2: the velocity's moving-average decay
};

// The three things done to a stage's weights beyond computing with them, each over all
// its tensors; the profiler times these very functions (profile_model.cpp,
// NOTE(weight-versions)), so that the planner prices what the executor runs.
// A copy of the weights, kept aside at a STEP whose old version a later action reads.
std::vector<torch::Tensor> stashCopy(const std::vector<torch::Tensor>& weights);
// Exchanges the contents of `weights` and `other` tensor by tensor: twice around each
// action that reads a stashed version (in, then back).
void swapVersions(const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& other);
// PipeMare's T2: `out` = w - steps x velocity, the estimate of the weights `steps` steps
// ago that a backward pass then runs on (swapped in and back).
void correctWeights(const std::vector<torch::Tensor>& out, const std::vector<torch::Tensor>& weights,
                    const std::vector<torch::Tensor>& velocity, int steps);

// Creates the stage's next version `new_version`: stashes the old one if asked, scales
// the gradients (by the factor, then by the clipping coefficient), applies the step's
// rate and T2's velocity, steps through the untracked aliases and clears the gradients
// (zeroes them where buckets own their storage).
void stepStage(StageState& stage, int new_version, const StepOptions& options);

// What a checkpoint keeps per parameter of stage `s` beside its weights: the optimizer's
// state and T2's velocity, by name (optimizer_state.h), and the reverse, which throws
// Error naming the stage where the state does not fit its parameters.
using ParameterState = std::map<std::string, torch::Tensor>;
std::vector<ParameterState> parameterStateOf(const StageState& stage);
void loadParameterState(StageState& stage, int s, const std::vector<ParameterState>& state);

}  // namespace pipetrain::runtime
