// The training recipe besides the pipeline: which optimizer, with which weight decay on
// which parameters, the learning rate of every step, and clipping by gradient norm.
// Plain numbers and names (no LibTorch): the runtime builds torch's optimizers from
// them (runtime/optimizer_state.h), and its executor, its single-process references and
// the staleness replay all take each step's rate from LearningRateSchedule::rate.
//
// The names and formulas are torch.optim's, so that a user's PyTorch script and a
// pipetrain run of the same recipe take the same steps (tests/cli/recipe_test.sh holds
// them to it):
//   adam   torch.optim.Adam   (weight decay as an L2 term of the gradient)
//   adamw  torch.optim.AdamW  (decoupled weight decay: w <- w (1 - lr wd) before the step)
//   sgd    torch.optim.SGD    (momentum, nesterov, L2 weight decay)
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "pipetrain/util/json_io.h"

namespace pipetrain::recipe {

struct OptimizerOptions {
  std::string name = "adam";  // adam | adamw | sgd
  double momentum = 0.9;      // sgd
  bool nesterov = false;      // sgd, with momentum > 0
  double weight_decay = -1;   // < 0: torch.optim's default for `name` (adamw 0.01, else 0)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  // The parameters that take no weight decay (NoDecayRule); "" = none exempt, as
  // torch.optim(model.parameters(), weight_decay=...) decays them all.
  std::string no_decay;

  double weightDecay() const;
};

// "adam", "adamw", "sgd".
const std::vector<std::string>& optimizerNames();

// Throws Error naming the option (--optimizer, --weight-decay, --betas, --eps,
// --momentum, --nesterov, --no-decay) where a value is unknown or out of range.
void checkOptimizer(const OptimizerOptions& options);

// Which parameters take no weight decay, by the user's parameter names (lower-cased):
//   "hf"   Hugging Face Trainer's name patterns: bias, layernorm, rmsnorm, and norm as a
//          name part ("norm.weight", "q_norm.weight"). Its trainer also exempts every
//          nn.LayerNorm by type, which names alone cannot see: a norm named otherwise
//          (GPT-2's "ln_1") is decayed here. "1d" catches those.
//   "1d"   every parameter of fewer than two dimensions (biases and norm scales), as
//          nanoGPT and Megatron-LM group them;
//   else   a comma-separated list of regular expressions, any of which found in the name
//          exempts it ("bias,norm": every bias and norm parameter; "wte|wpe": embeddings).
class NoDecayRule {
 public:
  // Throws Error naming --no-decay for a malformed expression.
  explicit NoDecayRule(const std::string& rule);
  bool empty() const { return rule_.empty(); }
  bool exempts(const std::string& parameter_name, int64_t dims) const;
  const std::string& text() const { return rule_; }

 private:
  std::string rule_;
  bool by_dims_ = false;
  std::vector<std::regex> patterns_;
};

// The learning rate of each optimizer step, as a fraction of the base rate `lr`:
// a linear warm-up, then a decay to a floor over the rest of the run's steps.
struct LearningRateSchedule {
  std::string decay = "constant";  // constant | cosine | linear | step
  int64_t warmup_steps = 0;        // step k < W runs at lr (k + 1) / W
  double min_lr = 0;               // the floor that cosine and linear reach at the run's end, and step stops at
  int64_t step_size = 0;           // step: the rate falls by `gamma` every this many steps after warm-up
  double gamma = 0.1;

  // The rate of step `step` (0-based) of a run of `total_steps` steps. After warm-up,
  // with i = step - W steps into a decay of D = total_steps - W:
  //   cosine  min + (lr - min) (1 + cos(pi i / D)) / 2   torch's CosineAnnealingLR(T_max=D, eta_min=min)
  //   linear  lr + (min - lr) i / D                     torch's LinearLR(1, min / lr, total_iters=D)
  //   step    max(min, lr gamma^floor(i / step_size))   torch's StepLR(step_size, gamma)
  // (i is held at D past the run's end). The warm-up is LinearLR(1 / W, 1, W - 1), and
  // the two are chained as SequentialLR(..., milestones=[W]) chains them.
  double rate(double lr, int64_t step, int64_t total_steps) const;
};

// "constant", "cosine", "linear", "step".
const std::vector<std::string>& scheduleNames();

// Throws Error naming the option (--lr-schedule, --lr-warmup, --lr-min, --lr-step-size,
// --lr-gamma) where a value is unknown or out of range for base rate `lr`.
void checkSchedule(const LearningRateSchedule& schedule, double lr);

// Throws Error naming --clip-grad-norm unless 0 (off) or a positive finite norm.
void checkClipNorm(double max_norm);

// The whole recipe as the summary and the calibration cache's key write it:
// {"optimizer": {...}, "lr": ..., "lr_schedule": {...}, "clip_grad_norm": ...}.
json_io::Json recipeToJson(const OptimizerOptions& optimizer, double lr, const LearningRateSchedule& schedule,
                           double clip_grad_norm);

// The recipe back from recipeToJson's JSON (a launcher hands its ranks theirs this way):
// the weight decay as resolved there, the fields it leaves out at their defaults. Error
// naming the field where one is missing, unknown or of the wrong type.
struct Recipe {
  OptimizerOptions optimizer;
  double lr = 0;
  LearningRateSchedule lr_schedule;
  double clip_grad_norm = 0;
};
Recipe recipeFromJson(const json_io::JsonCursor& j);

}  // namespace pipetrain::recipe
