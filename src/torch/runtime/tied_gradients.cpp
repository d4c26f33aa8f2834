#include "tied_gradients.h"

#include <algorithm>
#include <set>

#include "pipetrain/schedule/rank_facts.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
std::vector<int> holderStages(const models::TiedWeight& weight, const std::vector<StageLayers>& stages) {
  std::vector<int> out;
  for (const auto& holder : weight.holders) {
    int s = 0;
    while (s < static_cast<int>(stages.size()) &&
           !std::count(stages[s].layers.begin(), stages[s].layers.end(), holder.layer))
      ++s;
    if (s == static_cast<int>(stages.size()))
      throw Error("internal: layer " + std::to_string(holder.layer) + " is on no stage");
    out.push_back(s);
  }
  return out;
}

TiedGradients::TiedGradients(const models::Model& model, const std::vector<StageLayers>& stages,
                             const schedule::Program& program, int rank, DataChannel& channel)
    : channel_(channel) {
  const std::vector<int> mine = program.stagesOfRank(rank);
  for (const models::TiedWeight& weight : model.tied) {
    Group group;
    std::set<int> holder_stages, local, ranks;
    const std::vector<int> of_holder = holderStages(weight, stages);
    for (std::size_t h = 0; h < weight.holders.size(); ++h) {
      const int s = of_holder[h];
      holder_stages.insert(s);
      for (int r : program.stage_ranks[s]) ranks.insert(r);
      if (!std::count(mine.begin(), mine.end(), s)) continue;
      local.insert(s);
      const torch::Tensor param = models::heldParameter(model, weight.holders[h]);
      if (h > 0) later_copies_.insert(param.unsafeGetTensorImpl());
      group.copies.push_back({s, param, static_cast<int>(program.stage_ranks[s].size())});
    }
    if (group.copies.empty()) continue;
    if (local.size() > 1 && !schedule::stepsFollowAllGradients(program, rank, local))
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
