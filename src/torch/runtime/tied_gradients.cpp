#include "tied_gradients.h"

#include <algorithm>
#include <set>

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

int stageOfLayer(const std::vector<StageLayers>& stages, int layer) {
  for (int s = 0; s < static_cast<int>(stages.size()); ++s)
    if (std::count(stages[s].layers.begin(), stages[s].layers.end(), layer)) return s;
  throw Error("internal: layer " + std::to_string(layer) + " is on no stage");
}

// Whether each mini-batch's first STEP among `local` (this rank's holder stages) comes
// after every backward pass and all-reduce of all of them for that mini-batch.
bool stepsAfterAllGradients(const schedule::Program& program, int rank, const std::set<int>& local) {
  using schedule::ActionType;
  std::map<int, std::vector<int>> steps;       // per stage: its STEPs' positions
  std::map<int, std::vector<int>> last_before;  // per stage and STEP: its last gradient work before it
  const auto& actions = program.ranks[rank];
  std::map<int, int> last_gradient;
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const auto& a = actions[i];
    if (!local.count(a.stage)) continue;
    if (a.type == ActionType::B || a.type == ActionType::I || a.type == ActionType::W ||
        a.type == ActionType::ALLREDUCE)
      last_gradient[a.stage] = i;
    if (a.type == ActionType::STEP) {
      steps[a.stage].push_back(i);
      last_before[a.stage].push_back(last_gradient.count(a.stage) ? last_gradient[a.stage] : -1);
    }
  }
  std::size_t rounds = steps.empty() ? 0 : steps.begin()->second.size();
  for (const auto& [s, positions] : steps)
    if (positions.size() != rounds || steps.size() != local.size()) return false;
  for (std::size_t k = 0; k < rounds; ++k) {
    int first = actions.size();
    for (const auto& [s, positions] : steps) first = std::min(first, positions[k]);
    for (const auto& [s, gradients] : last_before)
      if (gradients[k] > first) return false;
  }
  return true;
}

}  // namespace

TiedGradients::TiedGradients(const models::Model& model, const std::vector<StageLayers>& stages,
                             const schedule::Program& program, int rank, DataChannel& channel)
    : channel_(channel) {
  const std::vector<int> mine = program.stagesOfRank(rank);
  for (const models::TiedWeight& weight : model.tied) {
    Group group;
    std::set<int> holder_stages, local, ranks;
    for (const auto& holder : weight.holders) {
      const int s = stageOfLayer(stages, holder.layer);
      holder_stages.insert(s);
      for (int r : program.stage_ranks[s]) ranks.insert(r);
      if (!std::count(mine.begin(), mine.end(), s)) continue;
      local.insert(s);
      group.copies.push_back(
          {s, models::heldParameter(model, holder), static_cast<int>(program.stage_ranks[s].size())});
    }
    if (group.copies.empty()) continue;
    if (local.size() > 1 && !stepsAfterAllGradients(program, rank, local))
      throw Error("layers " + models::describeHolders(model, weight) + " share a weight, and rank " +
                  std::to_string(rank) + " steps one of their stages before the other's gradients are complete; put " +
                  "the layers on one stage or choose another schedule");
    if (holder_stages.size() > 1) {
      group.ranks.assign(ranks.begin(), ranks.end());
      if (group.ranks.size() > 1) channel_.prepareGroup(group.ranks);
    }
    for (int s : local) groups_of_stage_[s].push_back(static_cast<int>(groups_.size()));
    groups_.push_back(std::move(group));
  }
}

void TiedGradients::beforeStep(int stage, int version, const std::function<double(int, int)>& factor) {
  auto it = groups_of_stage_.find(stage);
  if (it == groups_of_stage_.end()) return;
  torch::NoGradGuard no_grad;
  for (int g : it->second) {
    Group& group = groups_[g];
    if (group.reduced_version == version) continue;
    const bool across_ranks = group.ranks.size() > 1;
    torch::Tensor sum = torch::zeros_like(group.copies.front().param);
    for (const Copy& c : group.copies) {
      const torch::Tensor grad = c.param.grad();
      if (grad.defined()) sum.add_(grad, factor(c.stage, version) / (across_ranks ? c.replicas : 1));
    }
    if (across_ranks) channel_.startAllReduceSum(sum, group.ranks)->wait();
    for (Copy& c : group.copies) {
      const torch::Tensor scaled = sum / factor(c.stage, version);
      if (c.param.grad().defined()) c.param.mutable_grad().copy_(scaled);
      else c.param.mutable_grad() = scaled;
    }
    group.reduced_version = version;
  }
}

}  // namespace pipetrain::runtime
