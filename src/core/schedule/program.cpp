#include "pipetrain/schedule/program.h"

#include <cassert>

namespace pipetrain::schedule {

int Program::rankOf(int stage, int microbatch) const {
  const auto& replicas = stage_ranks[stage];
  assert(!replicas.empty());
  return replicas[static_cast<std::size_t>(microbatch) % replicas.size()];
}

std::vector<int> Program::stagesOfRank(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < num_stages; ++s)
    for (int r : stage_ranks[s])
      if (r == rank) out.push_back(s);
  return out;
}

void setChain(Program& program) {
  const int n = program.num_stages;
  program.stage_preds.assign(n, {});
  program.stage_succs.assign(n, {});
  for (int s = 0; s + 1 < n; ++s) {
    program.stage_succs[s].push_back(s + 1);
    program.stage_preds[s + 1].push_back(s);
  }
}

std::string toText(const Program& program) {
  std::string out;
  for (int r = 0; r < program.numRanks(); ++r) {
    out += "rank " + std::to_string(r) + ":";
    for (const std::string& text : toStrings(program.ranks[r])) out += " " + text;
    out += "\n";
  }
  return out;
}

std::string toCsv(const Program& program) {
  std::string out;
  for (const auto& actions : program.ranks) {
    std::vector<Action> compute;
    for (Action a : actions) {
      if (!isCompute(a.type)) continue;
      a.version = -1;  // versions are the generator's business, not the user's
      compute.push_back(a);
    }
    bool first = true;
    for (const std::string& text : toStrings(compute)) {
      out += (first ? "" : ",") + text;
      first = false;
    }
    out += "\n";
  }
  return out;
}

}  // namespace pipetrain::schedule
