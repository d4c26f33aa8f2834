#include "pipetrain/schedule/rank_facts.h"

#include <algorithm>
#include <climits>
#include <set>
#include <string>
#include <tuple>

#include "pipetrain/schedule/weight_versions.h"
#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {

// NOTE(send-release): a send's payload must live until the transport has delivered it,
// and Gloo only says so when waited on. Waiting blindly could deadlock (the peer may be
// waiting for us), and keeping every payload of an epoch-long Program grew ranks by
// megabytes per mini-batch. So a send is waited for once this rank has received from
// the same peer a message the peer sent after receiving ours: by then it was delivered.
std::map<int, std::vector<int>> deliveredSends(const Program& program, int rank) {
  struct Ends {
    int sender = -1, send_pos = -1, receiver = -1, recv_pos = -1;
  };
  std::map<std::tuple<int, int, uint32_t>, Ends> messages;  // (from, to, tag)
  for (int r = 0; r < program.numRanks(); ++r)
    for (int i = 0; i < static_cast<int>(program.ranks[r].size()); ++i) {
      const Action& a = program.ranks[r][i];
      if (!isComm(a.type)) continue;
      const bool send = isSend(a.type);
      const int peer = program.rankOf(a.peer_stage, a.microbatch);
      Ends& e = messages[{send ? r : peer, send ? peer : r, messageTag(program, a)}];
      if (send) e.sender = r, e.send_pos = i, e.receiver = peer;
      else e.recv_pos = i;
    }
  std::map<int, std::vector<std::pair<int, int>>> from_peer;  // peer -> (my RECV position, its SEND position)
  for (const auto& [key, e] : messages)
    if (e.receiver == rank) from_peer[e.sender].push_back({e.recv_pos, e.send_pos});
  for (auto& [peer, list] : from_peer) std::sort(list.begin(), list.end());
  std::map<int, std::vector<int>> delivered;
  for (const auto& [key, e] : messages) {
    if (e.sender != rank) continue;
    const auto& list = from_peer[e.receiver];
    for (auto it = std::upper_bound(list.begin(), list.end(), std::make_pair(e.send_pos, INT_MAX)); it != list.end();
         ++it)
      if (it->second > e.recv_pos) {
        delivered[it->first].push_back(e.send_pos);
        break;
      }
  }
  return delivered;
}

}  // namespace

uint32_t messageTag(const Program& program, bool backward, int producer, int consumer, int microbatch) {
  const uint64_t stages = program.num_stages;
  const uint64_t tag = ((static_cast<uint64_t>(backward) * stages + producer) * stages + consumer) *
                           static_cast<uint64_t>(program.totalMicrobatches()) +
                       microbatch;
  if (tag >= kMessageTags)
    throw Error("too many stages x micro-batches to tag messages (" + std::to_string(program.num_stages) +
                " stages, " + std::to_string(program.totalMicrobatches()) + " micro-batches)");
  return static_cast<uint32_t>(tag);
}

uint32_t messageTag(const Program& program, const Action& message) {
  const auto [backward, producer, consumer, microbatch] = messageOf(message);
  return messageTag(program, backward, producer, consumer, microbatch);
}

RankFacts messageFacts(const Program& program, int rank) {
  RankFacts f;
  f.rank = rank;
  const auto& actions = program.ranks[rank];
  f.positions.resize(actions.size());
  // A message -> the slot its RECV fills. A validated Program receives a message before
  // the pass that reads it.
  std::map<MessageKey, int> slot_of;
  std::set<int> peers;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    PositionFacts& at = f.positions[i];
    const int j = a.microbatch;
    if (isComm(a.type)) {
      const MessageKey key = messageOf(a);
      const auto [gradient, producer, consumer, microbatch] = key;
      MessageFacts m{program.rankOf(a.peer_stage, j), producer, consumer, gradient, messageTag(program, a), -1};
      if (!isSend(a.type)) {
        m.slot = f.slots++;
        slot_of[key] = m.slot;
      }
      peers.insert(m.peer);
      at.message = m;
    }
    auto slotOf = [&](bool gradient, int producer, int consumer) {
      const int other = gradient ? consumer : producer;
      if (program.rankOf(other, j) == rank) return -1;
      const auto it = slot_of.find(MessageKey{gradient, producer, consumer, j});
      if (it == slot_of.end())
        throw Error("internal: rank " + std::to_string(rank) + " runs " + toString(a) + " before receiving its input");
      return it->second;
    };
    if (a.type == ActionType::F)
      for (int q : program.stage_preds[a.stage]) at.input_slots.push_back(slotOf(false, q, a.stage));
    if (a.type == ActionType::B || a.type == ActionType::I)
      for (int t : program.stage_succs[a.stage]) at.input_slots.push_back(slotOf(true, a.stage, t));
  }
  f.peers.assign(peers.begin(), peers.end());
  return f;
}

RankFacts rankFacts(const Program& program, int rank) {
  RankFacts f = messageFacts(program, rank);
  const auto& actions = program.ranks[rank];
  const int n = static_cast<int>(actions.size());
  const std::vector<Retirement> retired = retirements(program)[rank];
  for (const Retirement& r : retired)
    if (r.position < n) f.positions[std::max(0, r.position)].retire.push_back({r.stage, r.version});
  const std::vector<VersionWork> versions = versionWork(program, /*t2=*/false)[rank];
  std::map<int, int> last_position;  // mini-batch -> the rank's last action of it
  for (int i = 0; i < n; ++i) {
    const Action& a = actions[i];
    f.positions[i].stash_at_step = versions[i].stashes;
    if (a.type == ActionType::F) f.forward_version[{a.stage, a.microbatch}] = a.version;
    if (a.type == ActionType::I) f.split_stages.insert(a.stage);
    if (a.type == ActionType::ALLREDUCE)
      for (int k = i - 1; k >= 0; --k)
        if (actions[k].stage == a.stage && (actions[k].type == ActionType::B || actions[k].type == ActionType::W)) {
          f.positions[k].completes_gradients_of = a.stage;
          break;
        }
    if (a.microbatch >= 0) last_position[a.microbatch / program.microbatches] = i;
  }
  for (const auto& [k, i] : last_position) f.positions[i].minibatch_done = k;
  for (auto& [recv, sends] : deliveredSends(program, rank)) f.positions[recv].sends_delivered = std::move(sends);
  f.steps = stepCombination(program);
  f.stage_delays = stageDelays(program);
  return f;
}

bool stepsFollowAllGradients(const Program& program, int rank, const std::set<int>& stages) {
  std::map<int, std::vector<int>> steps;        // per stage: its STEPs' positions
  std::map<int, std::vector<int>> last_before;  // per stage and STEP: its last gradient work before it
  std::map<int, int> last_gradient;
  const auto& actions = program.ranks.at(rank);
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const Action& a = actions[i];
    if (!stages.count(a.stage)) continue;
    if (a.type == ActionType::B || a.type == ActionType::I || a.type == ActionType::W ||
        a.type == ActionType::ALLREDUCE)
      last_gradient[a.stage] = i;
    if (a.type == ActionType::STEP) {
      steps[a.stage].push_back(i);
      auto it = last_gradient.find(a.stage);
      last_before[a.stage].push_back(it == last_gradient.end() ? -1 : it->second);
    }
  }
  if (steps.size() != stages.size()) return false;
  const std::size_t rounds = steps.begin()->second.size();
  for (const auto& [s, positions] : steps)
    if (positions.size() != rounds) return false;
  for (std::size_t k = 0; k < rounds; ++k) {
    int first = static_cast<int>(actions.size());
    for (const auto& [s, positions] : steps) first = std::min(first, positions[k]);
    for (const auto& [s, gradients] : last_before)
      if (gradients[k] > first) return false;
  }
  return true;
}

}  // namespace pipetrain::schedule
