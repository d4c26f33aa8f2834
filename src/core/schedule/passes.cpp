#include "pipetrain/schedule/passes.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>

#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {

// messageOf(a) in one integer: (backward?, producer stage, consumer stage, micro-batch),
// stages below 2^15 (limits: at most 8,192), micro-batches below 2^32.
uint64_t packedMessage(const Action& a) {
  const auto [backward, producer, consumer, microbatch] = messageOf(a);
  return (uint64_t{backward} << 63) | (static_cast<uint64_t>(producer) << 48) |
         (static_cast<uint64_t>(consumer) << 32) | static_cast<uint32_t>(microbatch);
}

// NOTE(receive-order): a channel that pairs messages by order (NCCL) needs each receiver
// to post the receives from one sender in the order that sender sends. Lowering puts a
// RECV before its consumer, and the V placements consume in another order than they
// send: a chunk's activations and the other chunk's gradients cross between neighbours.
// So each RECV moves up to just before the next RECV, in the sender's order, that comes
// earlier on this rank. That never adds a wait: the message moved was sent before the
// one this rank was already waiting for there, so it has arrived by then.
// Whether every rank already posts the receives from each sender in that sender's order
// (every schedule with one stage per rank): then the pass has nothing to move, and it
// is told without hashing every message of the Program.
bool receivesInSendersOrder(const Program& program) {
  const int ranks = program.numRanks();
  // sent[s]: s's messages as (receiver, message), in s's order; sorted stably by
  // receiver below. received[s]: what each receiver takes from s, as (receiver,
  // message), receivers ascending (the loop's order) and each in its own order. Flat
  // vectors, not maps of vectors: this runs for every Program the planner simulates.
  std::vector<std::vector<std::pair<int, uint64_t>>> sent(ranks), received(ranks);
  for (int r = 0; r < ranks; ++r)
    for (const Action& a : program.ranks[r]) {
      if (!isComm(a.type)) continue;
      const int peer = program.rankOf(a.peer_stage, a.microbatch);
      if (isSend(a.type))
        sent[r].emplace_back(peer, packedMessage(a));
      else
        received[peer].emplace_back(r, packedMessage(a));
    }
  for (int s = 0; s < ranks; ++s) {
    std::stable_sort(sent[s].begin(), sent[s].end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    if (sent[s] != received[s]) return false;
  }
  return true;
}

void orderReceivesAsSent(Program& program) {
  if (receivesInSendersOrder(program)) return;
  // Every simulated plan is lowered, so this pass is on the planner's hot path: hashed
  // message keys and per-rank vectors, not ordered maps of tuples (which made searches
  // on PipeDream's published profiles 1.5-1.8x slower when this pass came in).
  std::unordered_map<uint64_t, int> send_index;  // a message's place in its sender's order (per receiver)
  std::size_t actions_in_all = 0;
  for (const auto& rank : program.ranks) actions_in_all += rank.size();
  send_index.reserve(actions_in_all / 4);  // about one SEND in four actions
  for (int r = 0; r < program.numRanks(); ++r) {
    std::vector<int> sent_to(program.numRanks(), 0);
    for (const Action& a : program.ranks[r])
      if (isSend(a.type)) send_index[packedMessage(a)] = sent_to[program.rankOf(a.peer_stage, a.microbatch)]++;
  }
  for (int r = 0; r < program.numRanks(); ++r) {
    std::vector<Action>& actions = program.ranks[r];
    const int n = static_cast<int>(actions.size());
    // Per sender: (index in its order, position here) of each receive.
    std::vector<std::vector<std::pair<int, int>>> from(program.numRanks());
    // (A receive nothing sends stays where it is: validate() names it.)
    std::vector<char> reordered(n, 0);
    for (int i = 0; i < n; ++i) {
      if (!isComm(actions[i].type) || isSend(actions[i].type)) continue;
      const auto sent = send_index.find(packedMessage(actions[i]));
      if (sent == send_index.end()) continue;
      from[program.rankOf(actions[i].peer_stage, actions[i].microbatch)].push_back({sent->second, i});
      reordered[i] = 1;
    }
    // Each receive's new place: before the action at `anchor`, receives meeting there in
    // their senders' orders. (anchor, sender, index in the sender's order, position now)
    std::vector<std::tuple<int, int, int, int>> moved;
    for (int sender = 0; sender < program.numRanks(); ++sender) {
      std::vector<std::pair<int, int>>& receives = from[sender];
      std::sort(receives.begin(), receives.end());
      int anchor = n;
      for (auto it = receives.rbegin(); it != receives.rend(); ++it) {
        anchor = std::min(anchor, it->second);
        moved.emplace_back(anchor, sender, it->first, it->second);
      }
    }
    std::sort(moved.begin(), moved.end());
    std::vector<Action> out;
    out.reserve(n);
    std::size_t next = 0;
    for (int i = 0; i < n; ++i) {
      for (; next < moved.size() && std::get<0>(moved[next]) == i; ++next) out.push_back(actions[std::get<3>(moved[next])]);
      if (!reordered[i]) out.push_back(actions[i]);
    }
    actions = std::move(out);
  }
}

}  // namespace

Program lower(Program program) {
  // The compute actions move out and each rank's list is rebuilt around them: copying
  // them first cost a tenth of a plan's simulation (every simulated plan is lowered).
  const std::vector<std::vector<Action>> compute = std::move(program.ranks);
  program.ranks.assign(compute.size(), {});
  for (int r = 0; r < program.numRanks(); ++r) {
    // The receives before (or sends after) an action that consumes or makes data:
    // activations come from predecessors and go to successors, gradients the other way.
    auto addComm = [&](const Action& a, bool receives, std::vector<Action>& out_actions) {
      const bool forward = a.type == ActionType::F;
      if (!forward && a.type != ActionType::B && a.type != ActionType::I) return;
      const ActionType type = receives ? (forward ? ActionType::RECV_F : ActionType::RECV_B)
                                       : (forward ? ActionType::SEND_F : ActionType::SEND_B);
      const bool predecessors = forward == receives;
      for (int q : predecessors ? program.stage_preds[a.stage] : program.stage_succs[a.stage])
        if (program.rankOf(q, a.microbatch) != r) out_actions.push_back(commAction(type, a.stage, a.microbatch, q));
    };
    const auto& in = compute[r];
    std::vector<Action> actions;
    actions.reserve(3 * in.size());  // a compute action and, on a chain, a receive and a send
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
    program.ranks[r] = std::move(actions);
  }
  orderReceivesAsSent(program);
  return program;
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

}  // namespace pipetrain::schedule
