#include "training_recipe.h"

#include "optimizer_state.h"
#include "pipetrain/recipe/recipe.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/staleness.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

std::vector<int> allLayers(const models::Model& model) {
  std::vector<int> all(model.layers.size());
  for (std::size_t l = 0; l < all.size(); ++l) all[l] = static_cast<int>(l);
  return all;
}

std::unique_ptr<torch::optim::Optimizer> optimizerOf(const TrainConfig& c, const models::Model& model,
                                                     const std::vector<int>& layers, std::vector<torch::Tensor> params) {
  return makeOptimizer(c.optimizer, c.lr, std::move(params), models::parameterNames(model, layers));
}

bool clipsWholeModel(const std::string& schedule) { return !schedule::isAsynchronous(schedule); }

StepRecipe stepRecipe(const TrainConfig& c, const schedule::Program& one_minibatch, int64_t minibatches) {
  const schedule::StepCombination steps = schedule::stepCombination(one_minibatch);
  std::vector<int64_t> total;
  for (const auto& versions : steps.combined) total.push_back(minibatches * static_cast<int64_t>(versions.size()));
  StepRecipe r;
  r.rate = [schedule = c.lr_schedule, lr = c.lr, total](int s, int64_t step) {
    return schedule.rate(lr, step, total.at(s));
  };
  r.clip_norm = c.clip_grad_norm;
  r.whole_model = clipsWholeModel(c.plan.schedule.name);
  return r;
}

void checkRecipe(const TrainConfig& c, const models::Model& model) {
  recipe::checkOptimizer(c.optimizer);
  if (!(c.lr > 0)) throw Error("--lr must be positive");
  recipe::checkSchedule(c.lr_schedule, c.lr);
  recipe::checkClipNorm(c.clip_grad_norm);
  // A rule that exempts none of the model's parameters is a typo, not a recipe.
  const recipe::NoDecayRule rule(c.optimizer.no_decay);
  if (rule.empty()) return;
  const auto all = allLayers(model);
  const std::vector<std::string> names = models::parameterNames(model, all);
  const std::vector<torch::Tensor> params = model.parameters(all);
  for (std::size_t i = 0; i < names.size(); ++i)
    if (rule.exempts(names[i], params[i].dim())) return;
  std::string some;
  for (std::size_t i = 0; i < names.size() && i < 4; ++i) some += (i ? ", " : "") + names[i];
  throw Error("--no-decay '" + rule.text() + "' matches none of model '" + model.name + "''s " +
              std::to_string(names.size()) + " parameters (" + some + (names.size() > 4 ? ", ..." : "") + ")");
}

}  // namespace pipetrain::runtime
