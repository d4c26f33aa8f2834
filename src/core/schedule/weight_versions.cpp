#include "pipetrain/schedule/weight_versions.h"

#include <map>
#include <utility>

#include "pipetrain/schedule/program_memory.h"

namespace pipetrain::schedule {

double versionSeconds(ActionType type, const VersionWork& work, const StageVersionCosts& costs) {
  const bool backward = type == ActionType::B || type == ActionType::I;
  double t = 0;
  if (work.reads_stash) t += 2 * costs.swap * (backward ? costs.backward_runs : 1);  // in, and back
  if (work.corrects) t += costs.t2_runs * (costs.correction + 2 * costs.swap);
  if (work.stashes) t += costs.stash;
  return t;
}

namespace {

std::vector<VersionWork> rankVersionWork(const Program& program, int rank, const std::vector<Retirement>& retired,
                                         bool correcting) {
  const std::vector<Action>& actions = program.ranks[rank];
  std::map<std::pair<int, int>, int> retired_at;  // (stage, version) -> the position after which nothing reads it
  for (const Retirement& r : retired) retired_at[{r.stage, r.version}] = r.position;
  std::map<int, int> current;                          // stage -> its version on the rank (0 before any STEP)
  std::map<std::pair<int, int>, int> forward_version;  // (stage, micro-batch) -> what its F read
  std::vector<VersionWork> out(actions.size());
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const int now = current[a.stage];
    VersionWork& w = out[i];
    switch (a.type) {
      case ActionType::STEP: {
        const auto it = retired_at.find({a.stage, a.version - 1});
        w.stashes = it != retired_at.end() && it->second > static_cast<int>(i);
        current[a.stage] = a.version;
        break;
      }
      case ActionType::F:
        forward_version[{a.stage, a.microbatch}] = a.version;
        w.reads_stash = a.version != now;
        break;
      case ActionType::B:
      case ActionType::I: {
        w.reads_stash = a.version != now;
        const auto f = forward_version.find({a.stage, a.microbatch});
        w.corrects = correcting && !w.reads_stash && f != forward_version.end() && now > f->second;
        break;
      }
      case ActionType::W:
        w.reads_stash = a.version != now;
        break;
      default:
        break;
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<VersionWork>> versionWork(const Program& program, bool t2) {
  const std::vector<std::vector<Retirement>> retired = retirements(program);
  const bool correcting = t2 && program.backward_weights == BackwardWeights::kLatest;
  std::vector<std::vector<VersionWork>> out;
  for (int r = 0; r < program.numRanks(); ++r) out.push_back(rankVersionWork(program, r, retired[r], correcting));
  return out;
}

}  // namespace pipetrain::schedule
