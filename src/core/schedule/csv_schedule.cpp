#include "pipetrain/schedule/csv_schedule.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <utility>

#include "pipetrain/schedule/passes.h"
#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::schedule {
namespace {

using Key = std::tuple<int, int, int, int>;  // (type, stage, micro-batch, peer stage or -1)

Key keyOf(const Action& a) {
  return {static_cast<int>(a.type), a.stage, a.microbatch, isComm(a.type) ? a.peer_stage : -1};
}
Key computeKey(ActionType type, int stage, int microbatch) { return {static_cast<int>(type), stage, microbatch, -1}; }

// One action as the file wrote it.
struct Written {
  Action action;
  bool full_backward_token = false;  // written BW (the older notation's full backward)
  std::string where;                 // "line L, column C"
};

// A cell's actions; `NBWm` is read as the older notation's full backward of stage N,
// micro-batch m.
std::vector<Written> parseCell(std::string cell, const std::string& where) {
  std::size_t digits = 0;
  while (digits < cell.size() && std::isdigit(static_cast<unsigned char>(cell[digits]))) ++digits;
  const bool bw = digits > 0 && cell.compare(digits, 2, "BW") == 0 && digits + 2 < cell.size() &&
                  std::isdigit(static_cast<unsigned char>(cell[digits + 2]));
  if (bw) cell.erase(digits + 1, 1);
  std::vector<Written> out;
  for (const Action& a : parseActions(cell)) out.push_back({a, bw, where});
  return out;
}

// Settles the file's notation and rewrites the older one's B (input gradients) as I and
// BW as B.
BackwardNotation settleNotation(std::vector<std::vector<Written>>& rows, const std::string& origin) {
  const Written* first_bw = nullptr;
  const Written* first_i = nullptr;
  std::map<std::pair<int, int>, const Written*> plain_b;
  const Written* b_with_w = nullptr;
  for (const auto& row : rows)
    for (const Written& w : row) {
      const Action& a = w.action;
      if (w.full_backward_token && !first_bw) first_bw = &w;
      if (a.type == ActionType::I && !first_i) first_i = &w;
      if (a.type == ActionType::B && !w.full_backward_token) plain_b.emplace(std::make_pair(a.stage, a.microbatch), &w);
    }
  for (const auto& row : rows)
    for (const Written& w : row)
      if (w.action.type == ActionType::W && !b_with_w && plain_b.count({w.action.stage, w.action.microbatch}))
        b_with_w = &w;
  if (!first_bw && !b_with_w) return BackwardNotation::kCurrent;
  const Written& older = first_bw ? *first_bw : *b_with_w;
  if (first_i)
    throw Error(origin + ": " + first_i->where + ": " + toString(first_i->action) +
                " is PyTorch's current notation (I: input gradients), but " + older.where + " uses its older one (" +
                (first_bw ? "BW: the full backward" : "B and W of one micro-batch: B is the input gradients") +
                "); write the file in one notation");
  for (auto& row : rows)
    for (Written& w : row)
      if (w.action.type == ActionType::B && !w.full_backward_token) w.action.type = ActionType::I;
  return BackwardNotation::kOlder;
}

// The compute action a message's data comes from (sends) or goes to (receives), on the
// file's row: F for activations, B or I for gradients.
std::optional<std::size_t> endpointOf(const Action& message, const std::map<Key, std::size_t>& compute_at) {
  const bool activation = message.type == ActionType::SEND_F || message.type == ActionType::RECV_F;
  for (ActionType t : activation ? std::vector<ActionType>{ActionType::F} : std::vector{ActionType::B, ActionType::I})
    if (auto it = compute_at.find(computeKey(t, message.stage, message.microbatch)); it != compute_at.end())
      return it->second;
  return std::nullopt;
}


// Rank r's actions: the file's compute actions and sends in the file's order, each
// compute action preceded by the receives lowering gives it, then the STEPs. Checks the
// file's messages against lowering's.
std::vector<Action> mergeCommunication(const std::vector<Written>& row, const std::vector<Action>& lowered, int rank,
                                       const std::string& origin, int& late_sends) {
  std::map<Key, std::vector<Action>> receives_before;
  std::map<Key, Action> needed;
  std::vector<Action> pending, steps;
  for (const Action& a : lowered) {
    if (isComm(a.type)) needed.emplace(keyOf(a), a);
    if (a.type == ActionType::RECV_F || a.type == ActionType::RECV_B) pending.push_back(a);
    else if (isCompute(a.type)) receives_before[keyOf(a)] = std::exchange(pending, {});
    else if (a.type == ActionType::STEP) steps.push_back(a);
  }
  std::map<Key, std::size_t> compute_at;
  for (std::size_t i = 0; i < row.size(); ++i)
    if (isCompute(row[i].action.type)) compute_at[keyOf(row[i].action)] = i;
  const std::string rank_name = "rank " + std::to_string(rank);

  std::vector<Action> out;
  std::set<Key> given;
  for (std::size_t i = 0; i < row.size(); ++i) {
    const Action& a = row[i].action;
    const std::string at = origin + ": " + row[i].where + ": " + toString(a);
    if (isCompute(a.type)) {
      if (!(i > 0 && row[i - 1].action.overlap_next)) {  // a pair's receives all come before its F
        const auto& receives = receives_before[keyOf(a)];
        out.insert(out.end(), receives.begin(), receives.end());
      }
      out.push_back(a);
      out.back().version = 0;  // as readCsvSchedule reads every compute action
      continue;
    }
    if (!needed.count(keyOf(a)))
      throw Error(at + " is no message of this schedule: messages cross the stage edges between two ranks, and " +
                  rank_name + " has none with stage " + std::to_string(a.peer_stage) + " for micro-batch " +
                  std::to_string(a.microbatch) + " of stage " + std::to_string(a.stage));
    given.insert(keyOf(a));
    const std::optional<std::size_t> endpoint = endpointOf(a, compute_at);
    if (isSend(a.type)) {
      if (!endpoint || *endpoint > i)
        throw Error(at + " sends before this rank computes the data it carries");
      // Late: other compute of this rank runs between the producer (or its overlapped
      // partner) and the send.
      for (std::size_t k = *endpoint + 1; k < i; ++k)
        if (isCompute(row[k].action.type) && !(k == *endpoint + 1 && row[*endpoint].action.overlap_next)) {
          ++late_sends;
          break;
        }
      out.push_back(a);
    } else if (endpoint && *endpoint < i) {
      throw Error(at + " comes after " + toString(row[*endpoint].action) + " (" + row[*endpoint].where +
                  "), which needs the data it receives");
    }
  }
  for (const auto& [key, message] : needed)
    if (!given.count(key))
      throw Error(origin + ": " + rank_name + " lacks " + toString(message) +
                  ", a message its compute actions need (or list no communication at all: lowering adds it)");
  out.insert(out.end(), steps.begin(), steps.end());
  return out;
}

}  // namespace

std::string CsvSchedule::where(const Action& action) const {
  if (auto it = written_at.find(keyOf(action)); it != written_at.end()) return it->second;
  if (!isComm(action.type)) return "";
  // A message lowering added: where the compute action it serves was written.
  const bool activation = action.type == ActionType::SEND_F || action.type == ActionType::RECV_F;
  for (ActionType t : activation ? std::vector<ActionType>{ActionType::F} : std::vector{ActionType::B, ActionType::I})
    if (auto it = written_at.find(computeKey(t, action.stage, action.microbatch)); it != written_at.end()) {
      Action served = action;
      served.type = t;
      served.version = -1;
      return "for " + toString(served) + " at " + it->second;
    }
  return "";
}

CsvSchedule readCsvSchedule(const std::string& csv_text, const std::string& origin, const StageDag& dag) {
  CsvSchedule out;
  std::vector<std::vector<Written>> rows;
  std::istringstream lines(csv_text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::vector<Written> row;
    std::istringstream cells(line);
    std::string cell;
    int column = 0;
    while (std::getline(cells, cell, ',')) {
      ++column;
      cell.erase(0, cell.find_first_not_of(" \t"));
      cell.erase(cell.find_last_not_of(" \t") + 1);
      if (cell.empty()) continue;  // PyTorch's CSVs leave idle slots empty
      const std::string where = "line " + std::to_string(line_no) + ", column " + std::to_string(column);
      std::vector<Written> parsed;
      try {
        parsed = parseCell(cell, where);
      } catch (const Error& e) {
        throw Error(origin + ": " + where + ": " + e.what());
      }
      for (Written& w : parsed) {
        const Action& a = w.action;
        if (a.stage >= limits::kMaxStages || a.microbatch >= limits::kMaxComputeActions ||
            (isComm(a.type) && a.peer_stage >= limits::kMaxStages))
          throw Error(origin + ": " + where + ": " + cell + " names stage " + std::to_string(a.stage) +
                      ", micro-batch " + std::to_string(a.microbatch) + "; pipetrain serves at most " +
                      std::to_string(limits::kMaxStages) + " stages and " +
                      std::to_string(limits::kMaxComputeActions) + " micro-batches");
        if (!isCompute(a.type) && !isComm(a.type))
          throw Error(origin + ": " + where + ": " + cell +
                      ": a schedule CSV holds compute actions (F, B, I, W, BW), and optionally their SEND_F, "
                      "RECV_F, SEND_B and RECV_B; each rank's STEP is added");
        row.push_back(std::move(w));
      }
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw Error(origin + ": no schedule rows");
  out.notation = settleNotation(rows, origin);

  Program p;
  p.schedule = origin;  // the validator's messages name the file
  for (const auto& row : rows) {
    p.ranks.emplace_back();
    for (const Written& w : row) {
      const auto [seen, fresh] = out.written_at.try_emplace(keyOf(w.action), w.where);
      if (!fresh)
        throw Error(origin + ": " + w.where + ": " + toString(w.action) + " repeats an action first scheduled at " +
                    seen->second);
      if (isComm(w.action.type)) {
        out.gave_communication = true;
      } else {
        p.ranks.back().push_back(w.action);
        p.ranks.back().back().version = 0;  // one mini-batch: every action reads the first weights
      }
    }
  }
  int max_stage = -1, max_mb = -1;
  for (const auto& row : p.ranks)
    for (const Action& a : row) {
      max_stage = std::max(max_stage, a.stage);
      max_mb = std::max(max_mb, a.microbatch);
    }
  if (max_stage < 0) throw Error(origin + ": no compute actions");
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
                    " and rank " + std::to_string(r) + " (" + out.where(a) + "); each stage must run on one rank");
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
  out.program = lower(std::move(p));
  if (out.gave_communication)
    for (int r = 0; r < out.program.numRanks(); ++r)
      out.program.ranks[r] = mergeCommunication(rows[r], out.program.ranks[r], r, origin, out.late_sends);
  return out;
}

void validateCsvSchedule(const CsvSchedule& schedule) {
  validate(schedule.program, [&](const Action& a) { return schedule.where(a); });
}

std::optional<GeneratorMatch> closestGenerator(const Program& program) {
  const int ranks = program.numRanks(), stages = program.num_stages;
  if (ranks == 0 || stages % ranks != 0) return std::nullopt;
  auto computeOrder = [](const std::vector<Action>& actions) {
    std::vector<Action> compute;
    for (Action a : actions)
      if (isCompute(a.type)) {
        a.version = -1;
        compute.push_back(a);
      }
    return toStrings(compute);
  };
  std::optional<GeneratorMatch> best;
  long best_prefix = -1;
  for (const std::string& name : scheduleNames()) {
    const ScheduleTraits& t = traits(name);
    if (t.asynchronous) continue;
    ScheduleSpec spec{name, program.microbatches, 1, t.placement == Placement::kLooped ? stages / ranks : 1, false};
    if (stagesPerRank(t, spec.chunks) != stages / ranks) continue;
    Program ours;
    try {
      ours = generate(spec, StageDag{program.stage_preds, program.stage_succs});
    } catch (const Error&) {
      continue;  // this generator cannot build the shape
    }
    if (ours.numRanks() != ranks || ours.stage_ranks != program.stage_ranks) continue;
    GeneratorMatch match{name, 0, ranks, ""};
    long prefix = 0;
    for (int r = 0; r < ranks; ++r) {
      const auto theirs = computeOrder(program.ranks[r]), mine = computeOrder(ours.ranks[r]);
      std::size_t k = 0;
      while (k < theirs.size() && k < mine.size() && theirs[k] == mine[k]) ++k;
      prefix += static_cast<long>(k);
      if (k == theirs.size() && k == mine.size()) {
        ++match.identical_ranks;
      } else if (match.first_difference.empty()) {
        auto around = [k](const std::vector<std::string>& v) {
          std::string s;
          for (std::size_t i = k; i < std::min(v.size(), k + 3); ++i) s += (s.empty() ? "" : " ") + v[i];
          return s.empty() ? "nothing" : s;
        };
        match.first_difference = "rank " + std::to_string(r) + ", action " + std::to_string(k) + ": " +
                                 around(theirs) + " where pipetrain's " + name + " has " + around(mine);
      }
    }
    if (!best || match.identical_ranks > best->identical_ranks ||
        (match.identical_ranks == best->identical_ranks && prefix > best_prefix)) {
      best = match;
      best_prefix = prefix;
    }
  }
  return best;
}

}  // namespace pipetrain::schedule
