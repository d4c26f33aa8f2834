#include "pipetrain/schedule/passes.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::schedule {

Program lower(const Program& compute_only) {
  Program out = compute_only;
  for (int r = 0; r < compute_only.numRanks(); ++r) {
    // The receives before (or sends after) an action that consumes or makes data:
    // activations come from predecessors and go to successors, gradients the other way.
    auto addComm = [&](const Action& a, bool receives, std::vector<Action>& out_actions) {
      const bool forward = a.type == ActionType::F;
      if (!forward && a.type != ActionType::B && a.type != ActionType::I) return;
      const ActionType type = receives ? (forward ? ActionType::RECV_F : ActionType::RECV_B)
                                       : (forward ? ActionType::SEND_F : ActionType::SEND_B);
      const bool predecessors = forward == receives;
      for (int q : predecessors ? compute_only.stage_preds[a.stage] : compute_only.stage_succs[a.stage])
        if (compute_only.rankOf(q, a.microbatch) != r) out_actions.push_back(commAction(type, a.stage, a.microbatch, q));
    };
    const auto& in = compute_only.ranks[r];
    std::vector<Action> actions;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (isComm(in[i].type))
        throw Error("lower: rank " + std::to_string(r) + " already has communication (" + toString(in[i]) + ")");
      // An overlapped pair starts when the inputs of both halves are here and sends both
      // results after it: the receives go before the pair, the sends after it.
      const std::size_t n = in[i].overlap_next && i + 1 < in.size() ? 2 : 1;
      for (std::size_t k = i; k < i + n; ++k) addComm(in[k], /*receives=*/true, actions);
      for (std::size_t k = i; k < i + n; ++k) actions.push_back(in[k]);
      for (std::size_t k = i; k < i + n; ++k) addComm(in[k], /*receives=*/false, actions);
      i += n - 1;
    }
    out.ranks[r] = std::move(actions);
  }
  return out;
}

Program forwardOnly(const Program& program) {
  Program out = program;
  out.schedule = program.schedule + " (forward only)";
  out.minibatches = 1;
  out.microbatches = program.totalMicrobatches();
  for (auto& actions : out.ranks) {
    std::vector<Action> kept;
    for (Action a : actions) {
      if (a.type != ActionType::F && a.type != ActionType::SEND_F && a.type != ActionType::RECV_F) continue;
      if (a.type == ActionType::F) {
        a.version = 0;
        a.overlap_next = false;  // its backward half is gone
      }
      kept.push_back(a);
    }
    actions = std::move(kept);
  }
  return out;
}

Program programFromCsv(const std::string& csv_text, const std::string& origin, const StageDag& dag) {
  std::vector<std::vector<Action>> rows;
  std::map<std::tuple<int, int, int>, std::string> first_seen;  // (stage, type, micro-batch) -> where
  std::istringstream lines(csv_text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::vector<Action> row;
    std::istringstream cells(line);
    std::string cell;
    int column = 0;
    while (std::getline(cells, cell, ',')) {
      ++column;
      cell.erase(0, cell.find_first_not_of(" \t"));
      cell.erase(cell.find_last_not_of(" \t") + 1);
      if (cell.empty()) continue;  // PyTorch's CSVs leave idle slots empty
      std::vector<Action> parsed;
      try {
        parsed = parseActions(cell);
      } catch (const Error& e) {
        throw Error(origin + ": line " + std::to_string(line_no) + ", column " + std::to_string(column) + ": " + e.what());
      }
      for (Action& a : parsed) {
        if (a.stage >= limits::kMaxStages || a.microbatch >= limits::kMaxComputeActions)
          throw Error(origin + ": line " + std::to_string(line_no) + ", column " + std::to_string(column) + ": " +
                      cell + " names stage " + std::to_string(a.stage) + ", micro-batch " +
                      std::to_string(a.microbatch) + "; pipetrain serves at most " +
                      std::to_string(limits::kMaxStages) + " stages and " +
                      std::to_string(limits::kMaxComputeActions) + " micro-batches");
        if (!isCompute(a.type))
          throw Error(origin + ": line " + std::to_string(line_no) + ", column " + std::to_string(column) +
                      ": only compute actions (F, B, I, W) belong in a schedule CSV; communication is added "
                      "automatically, found " + cell);
        a.version = 0;
        const std::string where = "line " + std::to_string(line_no) + ", column " + std::to_string(column);
        const auto [seen, fresh] = first_seen.try_emplace({a.stage, static_cast<int>(a.type), a.microbatch}, where);
        if (!fresh)
          throw Error(origin + ": " + where + ": " + cell + " repeats an action first scheduled at " + seen->second);
        row.push_back(a);
      }
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw Error(origin + ": no schedule rows");

  Program p;
  p.schedule = origin;  // the validator's messages name the file
  p.ranks = std::move(rows);
  int max_stage = -1, max_mb = -1;
  for (const auto& row : p.ranks)
    for (const Action& a : row) {
      max_stage = std::max(max_stage, a.stage);
      max_mb = std::max(max_mb, a.microbatch);
    }
  p.num_stages = max_stage + 1;
  p.microbatches = max_mb + 1;
  p.minibatches = 1;
  p.stage_ranks.assign(p.num_stages, {});
  for (int r = 0; r < p.numRanks(); ++r)
    for (const Action& a : p.ranks[r]) {
      auto& owners = p.stage_ranks[a.stage];
      if (owners.empty()) owners.push_back(r);
      else if (owners[0] != r)
        throw Error(origin + ": stage " + std::to_string(a.stage) + " appears on rank " + std::to_string(owners[0]) +
                    " and rank " + std::to_string(r) + "; each stage must run on one rank");
    }
  for (int s = 0; s < p.num_stages; ++s)
    if (p.stage_ranks[s].empty()) throw Error(origin + ": stage " + std::to_string(s) + " has no actions");
  if (dag.size() > 0) {
    if (dag.size() != p.num_stages)
      throw Error(origin + ": the schedule has " + std::to_string(p.num_stages) + " stages, the plan " + std::to_string(dag.size()));
    p.stage_preds = dag.preds;
    p.stage_succs = dag.succs;
  } else {
    setChain(p);
  }
  for (int r = 0; r < p.numRanks(); ++r)
    for (int s : p.stagesOfRank(r)) p.ranks[r].push_back(stepAction(s, 1));
  return lower(p);
}

}  // namespace pipetrain::schedule
