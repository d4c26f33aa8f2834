#include "pipetrain/schedule/staleness.h"

#include <algorithm>
#include <cmath>
#include <map>

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

double learningRateScale(int delay, int64_t step, int64_t warmup_steps) {
  if (delay <= 1) return 1.0;
  const double progress = warmup_steps <= 0 ? 1.0 : std::min(1.0, static_cast<double>(step) / warmup_steps);
  return std::pow(static_cast<double>(delay), -(1.0 - progress));
}

double correctionDecay(double decay, int delay) { return std::pow(decay, 1.0 / std::max(1, delay)); }

}  // namespace pipetrain::schedule
