#include "pipetrain/schedule/staleness.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "pipetrain/util/error.h"

namespace pipetrain::schedule {

std::vector<std::vector<int>> forwardDelays(const Program& program) {
  std::vector<std::vector<int>> delays(program.num_stages, std::vector<int>(program.totalMicrobatches(), -1));
  for (const auto& actions : program.ranks) {
    std::map<int, int> steps;                      // per stage, STEPs so far on this rank
    std::map<std::pair<int, int>, int> at_forward;  // (stage, micro-batch) -> steps at its F
    for (const Action& a : actions) {
      if (a.type == ActionType::STEP) ++steps[a.stage];
      if (a.type == ActionType::F) at_forward[{a.stage, a.microbatch}] = steps[a.stage];
      if (a.type == ActionType::B || a.type == ActionType::I) {
        auto it = at_forward.find({a.stage, a.microbatch});
        if (it != at_forward.end()) delays[a.stage][a.microbatch] = steps[a.stage] - it->second;
      }
    }
  }
  return delays;
}

std::vector<int> stageDelays(const Program& program) {
  std::vector<int> out;
  for (const auto& per_microbatch : forwardDelays(program))
    out.push_back(std::max(1, per_microbatch.empty() ? 1 : *std::max_element(per_microbatch.begin(), per_microbatch.end())));
  return out;
}

StepCombination stepCombination(const Program& program) {
  const int total = program.totalMicrobatches();
  StepCombination c;
  c.step_of.assign(program.num_stages, std::vector<int>(total, -1));
  c.combined.resize(program.num_stages);
  c.gradient_factor.resize(program.num_stages);
  for (const auto& actions : program.ranks) {
    std::map<int, std::vector<int>> pending;  // per stage, micro-batches since its last STEP
    for (const Action& a : actions) {
      if (a.type == ActionType::B || a.type == ActionType::W) pending[a.stage].push_back(a.microbatch);
      if (a.type != ActionType::STEP) continue;
      for (int j : pending[a.stage]) c.step_of[a.stage][j] = a.version;
      c.combined[a.stage][a.version] += static_cast<int>(pending[a.stage].size());
      pending[a.stage].clear();
    }
  }
  int last = program.num_stages - 1;
  while (last > 0 && !program.isLastStage(last)) --last;
  c.loss_scale.assign(total, 1.0);
  for (int j = 0; j < total; ++j)
    if (c.step_of[last][j] >= 0) c.loss_scale[j] = 1.0 / c.combined[last].at(c.step_of[last][j]);
  for (int s = 0; s < program.num_stages; ++s)
    for (int j = 0; j < total; ++j) {
      const int v = c.step_of[s][j];
      if (v < 0) continue;
      const double factor = 1.0 / (c.loss_scale[j] * c.combined[s].at(v));
      auto [it, inserted] = c.gradient_factor[s].insert({v, factor});
      if (!inserted && std::abs(it->second - factor) > 1e-12 * factor)
        throw Error("the Program's STEP v" + std::to_string(v) + " of stage " + std::to_string(s) +
                    " combines micro-batches whose losses are scaled differently");
    }
  return c;
}

double learningRateScale(int delay, int64_t step, int64_t warmup_steps) {
  if (delay <= 1) return 1.0;
  const double progress = warmup_steps <= 0 ? 1.0 : std::min(1.0, static_cast<double>(step) / warmup_steps);
  return std::pow(static_cast<double>(delay), -(1.0 - progress));
}

double correctionDecay(double decay, int delay) { return std::pow(decay, 1.0 / std::max(1, delay)); }

}  // namespace pipetrain::schedule
