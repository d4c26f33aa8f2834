// Every generator's Program validates, and its order and versions are the published ones.
#include "pipetrain/schedule/schedules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "pipetrain/schedule/passes.h"
#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/program_memory.h"
#include "pipetrain/schedule/staleness.h"
#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {

// Both contracts: the executors' (validate), and a channel's that matches messages by
// order instead of tags (NCCL).
void validateForEveryChannel(const Program& p) {
  validate(p);
  validateInOrderDelivery(p);
}

Program build(const std::string& name, int p, int m, int chunks = 1, int minibatches = 1, bool vsync = false) {
  ScheduleSpec spec;
  spec.name = name;
  spec.microbatches = m;
  spec.minibatches = minibatches;
  spec.chunks = chunks;
  spec.vertical_sync = vsync;
  return buildProgram(spec, chainDag(p * stagesPerRank(traits(name), chunks)));
}

// The compute actions of one rank as text, e.g. "0F0 0F1 0B0".
std::string computeText(const Program& p, int rank) {
  std::string out;
  for (const Action& a : p.ranks[rank])
    if (isCompute(a.type)) out += (out.empty() ? "" : " ") + toString(Action{a.type, a.stage, a.microbatch, -1, -1});
  return out;
}

TEST(Schedules, EveryScheduleValidatesOverManyShapes) {
  for (const std::string& name : scheduleNames())
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 4, 8, 16})
        for (int k : {1, 3}) {
          const ScheduleTraits& t = traits(name);
          const bool looped = t.placement == Placement::kLooped;
          const int chunks = looped ? 2 : 1;
          if (looped && m % p != 0) continue;
          if (m < t.min_microbatches_per_rank * p) continue;
          SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " k=" + std::to_string(k));
          EXPECT_NO_THROW(validateForEveryChannel(build(name, p, m, chunks, k)));
        }
}

// Between two neighbours of a V, one chunk's activations and the other chunk's gradients
// cross: the receiver consumes them in another order than the sender sends them, so
// lowering posts some receives before their consumers' turn (passes.cpp,
// NOTE(receive-order)), and only so far as the sender's order needs.
TEST(Schedules, VSchedulesReceiveInTheSendersOrder) {
  for (const std::string name : {"zb-v", "dualpipev"}) {
    const Program p = build(name, 4, 8);
    validateForEveryChannel(p);
    int early = 0;  // receives not right before the compute action that reads them
    for (const auto& actions : p.ranks)
      for (std::size_t i = 0; i < actions.size(); ++i) {
        if (!isComm(actions[i].type) || isSend(actions[i].type)) continue;
        std::size_t next = i + 1;
        while (next < actions.size() && isComm(actions[next].type)) ++next;
        const Action& consumer = actions[next];
        if (consumer.microbatch != actions[i].microbatch || consumer.stage != actions[i].stage) ++early;
      }
    EXPECT_GT(early, 0) << name;
  }
  // A chain keeps every receive right before its consumer.
  const Program chain = build("1f1b", 4, 8);
  for (const auto& actions : chain.ranks)
    for (std::size_t i = 0; i + 1 < actions.size(); ++i)
      if (isComm(actions[i].type) && !isSend(actions[i].type)) {
        EXPECT_EQ(actions[i + 1].microbatch, actions[i].microbatch);
        EXPECT_EQ(actions[i + 1].stage, actions[i].stage);
      }
}

TEST(Schedules, ZeroBubbleH2OnReplicasAndBranches) {
  // The list scheduler plays any layout: replicated stages (each replica its own lane,
  // an ALLREDUCE before each STEP) and a stage DAG with two branches.
  ScheduleSpec spec;
  spec.name = "zb-h2";
  spec.microbatches = 8;
  spec.minibatches = 2;
  const Program replicated = buildProgram(spec, chainDag(3), {2, 1, 2});
  validateForEveryChannel(replicated);
  int reduces = 0;
  for (const Action& a : replicated.ranks[0]) reduces += a.type == ActionType::ALLREDUCE;
  EXPECT_EQ(reduces, 2);
  StageDag dag;
  dag.preds = {{}, {0}, {0}, {1, 2}};
  dag.succs = {{1, 2}, {3}, {3}, {}};
  validateForEveryChannel(buildProgram(spec, dag));
}

// The chain plan of a 4-branch model on 16 GPUs (bench/graph_comparison.sh): stage 3's
// 4 replicas at depth 3 each wanted 4 micro-batches before their first backward pass,
// 16 in all, from stage 2, which sent 5 and then waited for a gradient. (PipeDream's
// replicas, which all-reduce after every round, still deadlock here: docs/schedules.md.)
TEST(Schedules, ReplicasBehindFewerReplicasDoNotDeadlock) {
  StageDag dag{{{}, {0}, {1}, {2}, {3}, {4}, {1, 3, 5}}, {{1}, {2, 6}, {3}, {4, 6}, {5}, {6}, {}}};
  for (const std::string name : {"1f1b", "zb-h1"}) {
    ScheduleSpec spec;
    spec.name = name;
    spec.microbatches = 16;
    spec.minibatches = 2;
    EXPECT_NO_THROW(validateForEveryChannel(buildProgram(spec, dag, {4, 4, 1, 4, 1, 1, 1}))) << name;
  }
  // Without replicas the warm-up is the depth to the sink, as ever.
  ScheduleSpec spec;
  spec.microbatches = 8;
  const Program chain = generate(spec, chainDag(4));
  int forwards_before_backward = 0;
  for (const Action& a : chain.ranks[0]) {
    if (a.type == ActionType::B) break;
    forwards_before_backward += a.type == ActionType::F;
  }
  EXPECT_EQ(forwards_before_backward, 4);
}

// Asynchronous schedules never flush, so a replicated stage's replicas meet in an
// all-reduce between backward passes (pipedream after every one). 1 4 2 1 deadlocked:
// replica 2 of stage 1 waited for the gradient of micro-batch 2, which stage 2 computes
// after its forward of micro-batch 4, which stage 1's replica 0 sends after the meeting.
TEST(Schedules, AsynchronousReplicasMeetWithoutDeadlock) {
  std::mt19937 rng(2);
  int checked = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 6);
    StageDag dag;
    dag.preds.resize(n);
    dag.succs.resize(n);
    for (int s = 1; s < n; ++s) {
      std::vector<int> from{s - 1};
      if (s >= 2 && rng() % 3 == 0) from.push_back(static_cast<int>(rng() % (s - 1)));  // a skip edge
      for (int q : from) {
        dag.preds[s].push_back(q);
        dag.succs[q].push_back(s);
      }
    }
    std::vector<int> replicas;
    for (int s = 0; s < n; ++s) replicas.push_back(1 << (rng() % 4));
    for (const std::string name : {"pipedream", "2bw", "pipemare", "1f1b", "zb-h1"}) {
      ScheduleSpec spec;
      spec.name = name;
      spec.microbatches = 8 << (trial % 2);
      spec.minibatches = 2;
      EXPECT_NO_THROW(validateForEveryChannel(buildProgram(spec, dag, replicas))) << name << " trial " << trial;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 1000);
  ScheduleSpec spec;
  spec.name = "pipedream";
  spec.microbatches = 8;
  EXPECT_NO_THROW(validateForEveryChannel(buildProgram(spec, chainDag(4), {1, 4, 2, 1})));
}

TEST(Schedules, OneFOneBOrderMatchesPipeDreamFlush) {
  const Program p = build("1f1b", 4, 6);
  EXPECT_EQ(computeText(p, 0), "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5");
  EXPECT_EQ(computeText(p, 3), "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5");
}

TEST(Schedules, GPipeRunsAllForwardsFirst) {
  EXPECT_EQ(computeText(build("gpipe", 2, 3), 1), "1F0 1F1 1F2 1B0 1B1 1B2");
}

TEST(Schedules, ZeroBubbleDefersWeightPassesByStageIndex) {
  const Program p = build("zb-h1", 3, 4);
  EXPECT_EQ(computeText(p, 0), "0F0 0F1 0F2 0I0 0W0 0F3 0I1 0W1 0I2 0W2 0I3 0W3");
  EXPECT_EQ(computeText(p, 2), "2F0 2I0 2F1 2I1 2F2 2I2 2W0 2F3 2I3 2W1 2W2 2W3");
}

TEST(Schedules, InterleavedFollowsMegatronChunkOrder) {
  // p=2, v=2, m=4: rank 0 warms up with (p-1)*2 + (v-1)*p = 4 chunk forwards.
  const Program p = build("interleaved", 2, 4, 2);
  EXPECT_EQ(computeText(p, 0), "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
}

TEST(Schedules, VersionsOfSynchronousSchedulesAdvancePerMinibatch) {
  const Program p = build("1f1b", 2, 2, 1, 2);
  for (const Action& a : p.ranks[0]) {
    if (isCompute(a.type)) {
      EXPECT_EQ(a.version, a.microbatch / 2) << toString(a);
    }
  }
}

TEST(Schedules, PipeDreamStashesTheForwardVersionForBackward) {
  const Program p = build("pipedream", 3, 6);
  const auto& rank0 = p.ranks[0];
  std::vector<int> fwd(6, -1);
  int steps = 0;
  for (const Action& a : rank0) {
    if (a.type == ActionType::F) fwd[a.microbatch] = a.version;
    if (a.type == ActionType::B) {
      EXPECT_EQ(a.version, fwd[a.microbatch]);
    }
    if (a.type == ActionType::STEP) ++steps;
  }
  EXPECT_EQ(steps, 6);  // one update per micro-batch
  EXPECT_EQ(fwd[0], 0);
  EXPECT_EQ(fwd[3], 1);  // F3 comes after B0 and its STEP
}

TEST(Schedules, TwoBWReadsThePreviousMinibatchVersion) {
  const Program p = build("2bw", 2, 4, 1, 3);
  for (const auto& actions : p.ranks)
    for (const Action& a : actions) {
      if (isCompute(a.type)) {
        EXPECT_EQ(a.version, std::max(0, a.microbatch / 4 - 1)) << toString(a);
      }
    }
}

TEST(Schedules, PipeMareBackwardReadsCurrentWeights) {
  const Program p = build("pipemare", 3, 2, 1, 3);
  EXPECT_EQ(p.backward_weights, BackwardWeights::kLatest);
  bool saw_newer = false;
  std::vector<int> fwd(6, -1);
  for (const Action& a : p.ranks[0]) {
    if (a.type == ActionType::F) fwd[a.microbatch] = a.version;
    if (a.type == ActionType::B && a.version > fwd[a.microbatch]) saw_newer = true;
  }
  EXPECT_TRUE(saw_newer);
}

TEST(Schedules, VerticalSyncUsesTheInputStageVersionEverywhere) {
  const Program p = build("pipedream", 3, 8, 1, 1, true);
  std::vector<int> input(8, -1);
  for (const Action& a : p.ranks[0])
    if (a.type == ActionType::F) input[a.microbatch] = a.version;
  for (const auto& actions : p.ranks)
    for (const Action& a : actions) {
      if (isCompute(a.type)) {
        EXPECT_EQ(a.version, input[a.microbatch]) << toString(a);
      }
    }
  // Downstream stages stash more versions than without vertical sync.
  EXPECT_GT(accountMemory(p)[2].weight_versions, accountMemory(build("pipedream", 3, 8))[2].weight_versions);
}

TEST(Schedules, BadNumbersAreRefusedClearly) {
  EXPECT_THROW(build("interleaved", 4, 6, 2), Error);  // m not divisible by p
  EXPECT_THROW(build("2bw", 4, 2), Error);             // m < p
  EXPECT_THROW(build("1f1b", 2, 2, 2), Error);         // chunks without interleaving
  try {
    build("bogus", 2, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("zb-h1"), std::string::npos) << "lists the known names: " << e.what();
  }
}

TEST(Schedules, ReplicasRunTheirOwnWarmupAndAllReduceBeforeStep) {
  ScheduleSpec spec;
  spec.name = "1f1b";
  spec.microbatches = 4;
  const Program p = buildProgram(spec, chainDag(2), {2, 1});
  ASSERT_EQ(p.numRanks(), 3);
  EXPECT_EQ(p.stage_ranks[0], (std::vector<int>{0, 1}));
  // Each replica of stage 0 keeps the stage's warm-up depth (1) in its own micro-batches;
  // filtering the unreplicated order would have left it none.
  EXPECT_EQ(computeText(p, 0), "0F0 0F2 0B0 0B2");
  EXPECT_EQ(computeText(p, 1), "0F1 0F3 0B1 0B3");
  EXPECT_EQ(toString(p.ranks[0][p.ranks[0].size() - 2]), "0ALLREDUCE");
  validateForEveryChannel(p);
}

// Replicas whose count does not divide the micro-batches take shares that differ by one
// wherever replicas step once per mini-batch; every such Program runs without deadlock
// and each STEP applies the mean gradient of the whole mini-batch.
TEST(Schedules, ReplicasMayTakeUnevenShares) {
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 4);
    std::vector<int> replicas;
    for (int s = 0; s < n; ++s) replicas.push_back(1 + static_cast<int>(rng() % 3));
    const int most = *std::max_element(replicas.begin(), replicas.end());
    for (const std::string name : {"gpipe", "1f1b", "zb-h1", "zb-h2", "2bw", "pipemare"}) {
      ScheduleSpec spec;
      spec.name = name;
      spec.microbatches = std::max(n, most) + static_cast<int>(rng() % 6);
      spec.minibatches = 3;
      SCOPED_TRACE(name + " trial " + std::to_string(trial) + " m " + std::to_string(spec.microbatches));
      Program p;
      try {
        p = buildProgram(spec, chainDag(n), replicas);
      } catch (const Error& e) {  // 2bw: too few micro-batches per replica for its warm-up
        EXPECT_EQ(name, "2bw") << e.what();
        continue;
      }
      EXPECT_NO_THROW(validateForEveryChannel(p));
      const StepCombination c = stepCombination(p);
      for (int s = 0; s < n; ++s)
        for (auto [version, combined] : c.combined[s]) EXPECT_EQ(combined, spec.microbatches) << "stage " << s;
      ++checked;
    }
  }
  EXPECT_GT(checked, 850);
  // Replica k runs micro-batches k, k + 3, ... over the whole run: 2, 1, 1 of mini-batch 0.
  ScheduleSpec spec;
  spec.name = "1f1b";
  spec.microbatches = 4;
  const Program p = buildProgram(spec, chainDag(1), {3});
  int forwards[3] = {0, 0, 0};
  for (int r = 0; r < 3; ++r)
    for (const Action& a : p.ranks[r]) forwards[r] += a.type == ActionType::F;
  EXPECT_EQ(forwards[0], 2);
  EXPECT_EQ(forwards[1], 1);
  EXPECT_EQ(forwards[2], 1);
  // Not where replicas step after every round, nor with more replicas than micro-batches.
  spec.name = "pipedream";
  EXPECT_THROW(buildProgram(spec, chainDag(1), {3}), Error);
  spec.name = "1f1b";
  EXPECT_THROW(buildProgram(spec, chainDag(1), {5}), Error);
}

TEST(Schedules, PipeDreamReplicasStepTogetherAfterEveryRound) {
  // 1F1B-RR: replica k of stage 0 takes micro-batches k, k + 2, ...; after each backward
  // pass both replicas all-reduce and step, so round i combines micro-batches 2i, 2i + 1.
  ScheduleSpec spec;
  spec.name = "pipedream";
  spec.microbatches = 4;
  spec.minibatches = 2;
  const Program p = buildProgram(spec, chainDag(2), {2, 1});
  validateForEveryChannel(p);
  std::string rank0;
  for (const Action& a : p.ranks[0])
    if (!isComm(a.type)) rank0 += (rank0.empty() ? "" : " ") + toString(a);
  EXPECT_EQ(rank0,
            "0F0v0 0F2v0 0B0v0 0ALLREDUCE 0STEPv1 0F4v1 0B2v0 0ALLREDUCE 0STEPv2 0F6v2 0B4v1 0ALLREDUCE 0STEPv3 "
            "0B6v2 0ALLREDUCE 0STEPv4");
  spec.vertical_sync = true;
  const Program vs = buildProgram(spec, chainDag(2), {2, 1});
  validateForEveryChannel(vs);
  // Stage 1 steps once per micro-batch, stage 0 once per two: micro-batch 4 read stage
  // 0's version 1 (two micro-batches in), so it reads stage 1's version 2.
  for (const Action& a : vs.ranks[2])
    if (a.type == ActionType::F && a.microbatch == 4) {
      EXPECT_EQ(a.version, 2);
    }
}

TEST(Schedules, LoweringPairsEverySendWithAReceive) {
  const Program p = build("1f1b", 2, 2);
  EXPECT_EQ(toText(p),
            "rank 0: 0F0v0 0SEND_F0>1 0F1v0 0SEND_F1>1 0RECV_B0<1 0B0v0 0RECV_B1<1 0B1v0 0STEPv1\n"
            "rank 1: 1RECV_F0<0 1F0v0 1B0v0 1SEND_B0>0 1RECV_F1<0 1F1v0 1B1v0 1SEND_B1>0 1STEPv1\n");
}

TEST(Schedules, DagWarmupComesFromTheLongestDownstreamPath) {
  // 0 -> {1, 2} -> 3 : two branches between a source and a sink.
  StageDag dag;
  dag.preds = {{}, {0}, {0}, {1, 2}};
  dag.succs = {{1, 2}, {3}, {3}, {}};
  ScheduleSpec spec;
  spec.microbatches = 4;
  const Program p = buildProgram(spec, dag);
  validateForEveryChannel(p);
  EXPECT_EQ(computeText(p, 0), "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3");  // depth 2
  EXPECT_EQ(computeText(p, 1), "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3");  // depth 1
}

}  // namespace
}  // namespace pipetrain::schedule
