#include "pipetrain/schedule/program.h"

#include <algorithm>
#include <cassert>

namespace pipetrain::schedule {

MessageIndex::MessageIndex(const Program& program)
    : program_(program), total_(static_cast<std::size_t>(program.totalMicrobatches())) {
  for (const auto& succs : program.stage_succs) {
    first_edge_.push_back(edges_);
    edges_ += succs.size();
  }
}

std::size_t MessageIndex::of(bool backward, int producer, int consumer, int microbatch) const {
  const auto& succs = program_.stage_succs[producer];
  const auto at = std::find(succs.begin(), succs.end(), consumer);
  assert(at != succs.end() && microbatch >= 0 && static_cast<std::size_t>(microbatch) < total_);
  const std::size_t edge = first_edge_[producer] + static_cast<std::size_t>(at - succs.begin());
  return (edge * 2 + (backward ? 1 : 0)) * total_ + static_cast<std::size_t>(microbatch);
}

std::size_t MessageIndex::of(const Action& a) const {
  switch (a.type) {
    case ActionType::SEND_F: return of(false, a.stage, a.peer_stage, a.microbatch);
    case ActionType::RECV_F: return of(false, a.peer_stage, a.stage, a.microbatch);
    case ActionType::SEND_B: return of(true, a.peer_stage, a.stage, a.microbatch);
    default: assert(a.type == ActionType::RECV_B); return of(true, a.stage, a.peer_stage, a.microbatch);
  }
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
