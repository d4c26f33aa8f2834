#include "recipe_options.h"

#include <vector>

#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {

void addRecipeOptions(CLI::App* cmd, runtime::TrainConfig& c) {
  recipe::OptimizerOptions& o = c.optimizer;
  cmd->add_option("--optimizer", o.name,
                  text::joined(recipe::optimizerNames()) + ", as torch.optim's Adam, AdamW (decoupled weight decay) and SGD")
      ->capture_default_str();
  cmd->add_option("--lr", c.lr, "learning rate (the schedule's base rate)")->capture_default_str();
  cmd->add_option("--weight-decay", o.weight_decay,
                  "weight decay (default: torch.optim's, 0.01 for adamw and 0 otherwise); L2 for adam and sgd");
  cmd->add_option("--no-decay", o.no_decay,
                  "parameters exempt from weight decay: hf (Hugging Face Trainer's name patterns), 1d (every "
                  "parameter of fewer than 2 dimensions: biases and norms), or comma-separated regular expressions "
                  "searched in the parameters' names, e.g. 'bias,norm'");
  cmd->add_option_function<std::vector<double>>(
         "--betas",
         [&o](const std::vector<double>& b) {
           if (b.size() != 2) throw Error("--betas takes two numbers, e.g. 0.9,0.95");
           o.beta1 = b[0];
           o.beta2 = b[1];
         },
         "adam, adamw: the moments' decay rates (default: 0.9,0.999)")
      ->delimiter(',')
      ->expected(2);
  cmd->add_option("--eps", o.eps, "adam, adamw: the denominator's epsilon")->capture_default_str();
  cmd->add_option("--momentum", o.momentum, "sgd: momentum")->capture_default_str();
  cmd->add_flag("--nesterov", o.nesterov, "sgd: Nesterov momentum");
  recipe::LearningRateSchedule& s = c.lr_schedule;
  cmd->add_option("--lr-schedule", s.decay,
                  text::joined(recipe::scheduleNames()) + ": the decay after the warm-up, to --lr-min at the run's last step "
                  "(step: by --lr-gamma every --lr-step-size steps)")
      ->capture_default_str();
  cmd->add_option("--lr-warmup", s.warmup_steps,
                  "linear learning-rate warm-up over this many optimizer steps of each stage (PipeDream steps per "
                  "micro-batch)");
  cmd->add_option("--lr-min", s.min_lr, "the floor the decay reaches (an absolute rate)");
  cmd->add_option("--lr-step-size", s.step_size, "--lr-schedule step: optimizer steps between decays");
  cmd->add_option("--lr-gamma", s.gamma, "--lr-schedule step: the factor of each decay")->capture_default_str();
  cmd->add_option("--clip-grad-norm", c.clip_grad_norm,
                  "clip gradients to this global norm, as torch.nn.utils.clip_grad_norm_ over the whole model "
                  "(each stage's own norm under an asynchronous schedule)")
      ->check(CLI::PositiveNumber);
}

}  // namespace pipetrain::cli
