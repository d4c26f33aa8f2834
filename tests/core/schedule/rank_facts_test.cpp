// The facts an executor reads off a Program (rank_facts.h), on every generator: message
// tags that pair each send with its receive, sends released only once certainly
// delivered, stashes where an old version is read later, and where mini-batches end.
#include "pipetrain/schedule/rank_facts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/error.h"
#include "../expect_error.h"
#include "program_on_ranks.h"

namespace pipetrain::schedule {
namespace {

bool isRecv(ActionType t) { return isComm(t) && !isSend(t); }

// Every schedule on 2 to 4 ranks, and the replicable ones with a stage on 2 replicas.
std::vector<Program> everySchedule() {
  std::vector<Program> programs;
  for (const std::string& name : scheduleNames()) {
    for (int p : {2, 3, 4}) programs.push_back(programOnRanks(name, p, 4 * p, 2));
    if (traits(name).replicable) programs.push_back(programOnRanks(name, 0, 8, 2, {2, 1, 2}));
  }
  return programs;
}

int positionOf(const Program& p, int rank, ActionType type, int microbatch) {
  for (int i = 0; i < static_cast<int>(p.ranks[rank].size()); ++i)
    if (p.ranks[rank][i].type == type && p.ranks[rank][i].microbatch == microbatch) return i;
  return -1;
}

TEST(RankFacts, TagsPairEverySendWithItsReceive) {
  for (const Program& p : everySchedule()) {
    SCOPED_TRACE(p.schedule + " on " + std::to_string(p.numRanks()) + " ranks");
    std::multiset<std::tuple<int, int, uint32_t>> sent, received;  // (from, to, tag)
    for (int r = 0; r < p.numRanks(); ++r)
      for (const Action& a : p.ranks[r]) {
        if (!isSend(a.type) && !isRecv(a.type)) continue;
        const int peer = p.rankOf(a.peer_stage, a.microbatch);
        if (isSend(a.type)) sent.insert({r, peer, messageTag(p, a)});
        if (isRecv(a.type)) received.insert({peer, r, messageTag(p, a)});
      }
    EXPECT_EQ(sent, received);
    const std::set<std::tuple<int, int, uint32_t>> distinct(sent.begin(), sent.end());
    EXPECT_EQ(distinct.size(), sent.size()) << "two messages share a tag";
  }
}

// Every message resolved where it moves: its peer and tag on both ends, one mailbox slot
// per receive, and each pass reading its inputs from the slots their receives filled.
TEST(RankFacts, EveryMessageAndInputIsResolvedToItsSlot) {
  for (const Program& p : everySchedule()) {
    SCOPED_TRACE(p.schedule + " on " + std::to_string(p.numRanks()) + " ranks");
    for (int r = 0; r < p.numRanks(); ++r) {
      const RankFacts facts = rankFacts(p, r);
      ASSERT_EQ(facts.positions.size(), p.ranks[r].size());
      std::map<MessageKey, int> slot_of;
      std::set<int> slots;
      for (std::size_t i = 0; i < facts.positions.size(); ++i) {
        const Action& a = p.ranks[r][i];
        const PositionFacts& at = facts.positions[i];
        ASSERT_EQ(at.message.has_value(), isComm(a.type)) << toString(a);
        if (at.message) {
          EXPECT_EQ(at.message->tag, messageTag(p, a));
          EXPECT_EQ(at.message->peer, p.rankOf(a.peer_stage, a.microbatch));
          const auto [gradient, producer, consumer, microbatch] = messageOf(a);
          EXPECT_EQ(at.message->gradient, gradient);
          EXPECT_EQ(std::make_pair(at.message->producer, at.message->consumer), std::make_pair(producer, consumer));
          if (isRecv(a.type)) {
            EXPECT_TRUE(slots.insert(at.message->slot).second) << "a slot filled twice";
            slot_of[messageOf(a)] = at.message->slot;
          } else {
            EXPECT_EQ(at.message->slot, -1);
          }
        }
        const bool forward = a.type == ActionType::F, backward = a.type == ActionType::B || a.type == ActionType::I;
        const std::vector<int>& others = forward ? p.stage_preds[a.stage] : p.stage_succs[a.stage];
        ASSERT_EQ(at.input_slots.size(), forward || backward ? others.size() : 0u) << toString(a);
        for (std::size_t k = 0; k < at.input_slots.size(); ++k) {
          const bool remote = p.rankOf(others[k], a.microbatch) != r;
          const MessageKey key = forward ? MessageKey{false, others[k], a.stage, a.microbatch}
                                         : MessageKey{true, a.stage, others[k], a.microbatch};
          EXPECT_EQ(at.input_slots[k], remote ? slot_of.at(key) : -1) << toString(a);
        }
      }
      EXPECT_EQ(facts.slots, static_cast<int>(slots.size()));
      EXPECT_EQ(messageFacts(p, r).slots, facts.slots);
    }
  }
}

// A send is released at a receive from its own peer, which the peer sent after taking
// the send in: it cannot still be in flight.
TEST(RankFacts, SendsAreReleasedOnlyOnceTheirPeerHasAnswered) {
  for (const Program& p : everySchedule()) {
    SCOPED_TRACE(p.schedule + " on " + std::to_string(p.numRanks()) + " ranks");
    for (int r = 0; r < p.numRanks(); ++r) {
      const RankFacts facts = rankFacts(p, r);
      std::set<int> released;
      for (int recv_pos = 0; recv_pos < static_cast<int>(facts.positions.size()); ++recv_pos) {
        const std::vector<int>& sends = facts.positions[recv_pos].sends_delivered;
        if (sends.empty()) continue;
        const Action& answer = p.ranks[r][recv_pos];
        ASSERT_TRUE(isRecv(answer.type));
        const int peer = p.rankOf(answer.peer_stage, answer.microbatch);
        const uint32_t answer_tag = messageTag(p, answer);
        int answer_sent_at = -1;  // on the peer
        for (int k = 0; k < static_cast<int>(p.ranks[peer].size()); ++k)
          if (isSend(p.ranks[peer][k].type) && messageTag(p, p.ranks[peer][k]) == answer_tag) answer_sent_at = k;
        for (int send_pos : sends) {
          const Action& send = p.ranks[r][send_pos];
          ASSERT_TRUE(isSend(send.type));
          EXPECT_LT(send_pos, recv_pos);
          EXPECT_EQ(p.rankOf(send.peer_stage, send.microbatch), peer);
          EXPECT_TRUE(released.insert(send_pos).second) << "released twice";
          const uint32_t tag = messageTag(p, send);
          int taken_at = -1;
          for (int k = 0; k < static_cast<int>(p.ranks[peer].size()); ++k)
            if (isRecv(p.ranks[peer][k].type) && messageTag(p, p.ranks[peer][k]) == tag) taken_at = k;
          EXPECT_LT(taken_at, answer_sent_at) << toString(send) << " released at " << toString(answer);
        }
      }
    }
  }
}

TEST(RankFacts, OneFOneBReleasesAnActivationWhenItsGradientComesBack) {
  const Program p = programOnRanks("1f1b", 2, 4, 1);
  const RankFacts facts = rankFacts(p, 0);
  // Rank 1 sends B0 after taking F0 and before F1: F0 is delivered then, F1 may not be.
  EXPECT_EQ(facts.positions.at(positionOf(p, 0, ActionType::RECV_B, 0)).sends_delivered,
            std::vector<int>{positionOf(p, 0, ActionType::SEND_F, 0)});
}

TEST(RankFacts, StashesOnlyVersionsReadLater) {
  const Program gpipe = programOnRanks("gpipe", 3, 6, 2), pipedream = programOnRanks("pipedream", 3, 6, 2);
  for (int r = 0; r < 3; ++r)
    for (const PositionFacts& at : rankFacts(gpipe, r).positions) EXPECT_FALSE(at.stash_at_step) << "rank " << r;
  // PipeDream's first stage steps after each backward pass while later micro-batches'
  // forward passes, on older versions, still owe their backward passes.
  const RankFacts first = rankFacts(pipedream, 0);
  int stashed = 0;
  for (std::size_t i = 0; i < first.positions.size(); ++i)
    if (first.positions[i].stash_at_step) {
      EXPECT_EQ(pipedream.ranks[0][i].type, ActionType::STEP);
      ++stashed;
    }
  EXPECT_GT(stashed, 0);
  // Each stashed version is dropped where the memory accounting retires it.
  const std::vector<Retirement> retired = retirements(pipedream)[0];
  std::size_t dropped = 0;
  for (const Retirement& r : retired) {
    const auto& at = first.positions.at(std::max(0, r.position)).retire;
    EXPECT_NE(std::find(at.begin(), at.end(), std::make_pair(r.stage, r.version)), at.end()) << r.position;
  }
  for (const PositionFacts& at : first.positions) dropped += at.retire.size();
  EXPECT_EQ(dropped, retired.size());
  EXPECT_GT(dropped, 0u);
  for (const auto& [key, version] : first.forward_version) {
    const auto [stage, microbatch] = key;
    EXPECT_EQ(pipedream.ranks[0][positionOf(pipedream, 0, ActionType::F, microbatch)].version, version);
    EXPECT_EQ(stage, 0);
  }
}

TEST(RankFacts, MiniBatchesEndAtTheirLastAction) {
  const Program p = programOnRanks("1f1b", 3, 6, 3);
  for (int r = 0; r < 3; ++r) {
    const RankFacts facts = rankFacts(p, r);
    int k = 0;
    for (int position = 0; position < static_cast<int>(facts.positions.size()); ++position) {
      const int minibatch = facts.positions[position].minibatch_done;
      if (minibatch < 0) continue;
      EXPECT_EQ(minibatch, k++);
      for (int i = position + 1; i < static_cast<int>(p.ranks[r].size()); ++i) {
        if (p.ranks[r][i].microbatch < 0) continue;
        EXPECT_GT(p.ranks[r][i].microbatch / p.microbatches, minibatch);
      }
    }
    EXPECT_EQ(k, 3);
  }
}

TEST(RankFacts, AReplicatedStageReducesAfterItsLastBackwardPass) {
  for (const std::string name : {"1f1b", "zb-h1"}) {
    SCOPED_TRACE(name);
    const Program p = programOnRanks(name, 0, 4, 2, {2, 1});
    const RankFacts facts = rankFacts(p, 0);  // replica 0 of stage 0
    int completing = 0;
    for (int position = 0; position < static_cast<int>(facts.positions.size()); ++position) {
      const int stage = facts.positions[position].completes_gradients_of;
      if (stage < 0) continue;
      ++completing;
      EXPECT_EQ(stage, 0);
      const ActionType t = p.ranks[0][position].type;
      EXPECT_TRUE(t == ActionType::B || t == ActionType::W) << toString(p.ranks[0][position]);
    }
    EXPECT_EQ(completing, 2);  // once per mini-batch
    EXPECT_EQ(facts.split_stages.size(), name == "zb-h1" ? 1u : 0u);
  }
}

// The peers a channel connects before the first message (DataChannel::preparePeers): the
// neighbours of a chain, both ends of a V's neighbours, a replicated stage's successor.
TEST(RankFacts, PeersAreTheRanksAProgramExchangesWith) {
  const Program chain = programOnRanks("1f1b", 4, 8, 1);
  EXPECT_EQ(rankFacts(chain, 0).peers, std::vector<int>({1}));
  EXPECT_EQ(rankFacts(chain, 2).peers, std::vector<int>({1, 3}));
  const Program v = programOnRanks("zb-v", 3, 6, 1);
  EXPECT_EQ(rankFacts(v, 0).peers, std::vector<int>({1}));
  EXPECT_EQ(rankFacts(v, 1).peers, std::vector<int>({0, 2}));
  const Program replicated = programOnRanks("1f1b", 0, 4, 1, {2, 1});  // ranks 0, 1: stage 0; rank 2: stage 1
  EXPECT_EQ(rankFacts(replicated, 2).peers, std::vector<int>({0, 1}));
  EXPECT_EQ(rankFacts(replicated, 1).peers, std::vector<int>({2}));
  EXPECT_TRUE(rankFacts(programOnRanks("gpipe", 1, 4, 1), 0).peers.empty());
}

// Tied weights on two stages of one rank (a V's first and last) are summed at the first
// of their STEPs: every synchronous generator has both stages' gradients complete there.
TEST(RankFacts, SynchronousSchedulesStepAfterAllOfARanksGradients) {
  for (const Program& p : everySchedule()) {
    if (traits(p.schedule).asynchronous) continue;
    SCOPED_TRACE(p.schedule + " on " + std::to_string(p.numRanks()) + " ranks");
    for (int r = 0; r < p.numRanks(); ++r) {
      const std::vector<int> mine = p.stagesOfRank(r);
      EXPECT_TRUE(stepsFollowAllGradients(p, r, {mine.begin(), mine.end()})) << "rank " << r;
    }
  }
  // A ZB-V whose rank 0 steps one of its stages before the other's last W: refused.
  Program early = programOnRanks("zb-v", 2, 4, 1);
  auto& actions = early.ranks[0];
  const auto step = std::find_if(actions.begin(), actions.end(), [](const Action& a) { return a.type == ActionType::STEP; });
  ASSERT_NE(step, actions.end());
  const int stage = step->stage;
  const auto last_w = std::find_if(actions.rbegin(), actions.rend(), [&](const Action& a) {
    return a.stage != stage && (a.type == ActionType::W || a.type == ActionType::B);
  });
  ASSERT_NE(last_w, actions.rend());
  const Action moved = *step, before = *last_w;
  actions.erase(step);
  actions.insert(std::find(actions.begin(), actions.end(), before), moved);
  EXPECT_FALSE(stepsFollowAllGradients(early, 0, {0, 3}));
  EXPECT_TRUE(stepsFollowAllGradients(early, 0, {stage}));  // alone, each stage is complete when it steps
  EXPECT_FALSE(stepsFollowAllGradients(early, 0, {0, 1}));  // stage 1 is rank 1's: no STEP here
}

TEST(RankFacts, TooManyMessagesForTagsAreRefused) {
  Program p;
  p.num_stages = 8192;
  p.microbatches = 1 << 20;
  testing::expectError([&] { messageTag(p, true, 8190, 8191, 0); }, {"too many stages x micro-batches", "8192 stages"});
}

}  // namespace
}  // namespace pipetrain::schedule
