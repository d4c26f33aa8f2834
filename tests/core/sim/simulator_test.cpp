// The simulator's handling of communication, contention, replicas, shared cores and scale.
#include "pipetrain/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/program_check.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/error.h"

namespace pipetrain::sim {
namespace {

struct Scenario {
  graph::LayerGraph graph;
  cluster::ClusterSpec cluster;
  plan::Plan plan;
};

// Two one-layer stages on two devices over one link; each layer's output is `bytes`.
Scenario twoStages(const std::string& schedule, int m, double bytes, double bandwidth, double latency,
                   int replicas_of_first = 1) {
  Scenario s{graph::LayerGraph::uniformChain(2, 1.0, 1.0, 0.0, static_cast<int64_t>(bytes), 0),
             cluster::ClusterSpec::uniform(2 + replicas_of_first - 1, int64_t{1} << 40, bandwidth, latency),
             plan::Plan{}};
  s.plan.microbatches = m;
  s.plan.schedule.name = schedule;
  plan::Stage first{{"layer0"}, {}};
  for (int k = 0; k < replicas_of_first; ++k) first.devices.push_back(s.cluster.device(k).name);
  s.plan.stages = {first, {{"layer1"}, {s.cluster.device(replicas_of_first).name}}};
  return s;
}

TEST(Simulator, TransfersAddLatencyAndWireTime) {
  // F0 on rank 0 [0,1]; activation arrives at 1 + c; F and B on rank 1 take 2;
  // the gradient arrives back at 3 + 2c; B on rank 0 ends at 4 + 2c.
  const double bytes = 1000, bandwidth = 500, latency = 0.25;  // c = 2.25
  Scenario s = twoStages("1f1b", 1, bytes, bandwidth, latency);
  const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  EXPECT_NEAR(e.report.makespan, 4 + 2 * 2.25, 1e-9);
  ASSERT_EQ(e.timeline.transfers.size(), 2u);
  EXPECT_NEAR(e.timeline.transfers[0].end, 1 + 2.25, 1e-9);
}

TEST(Simulator, TotalsAreTheTimelines) {
  // What the planner keeps of a simulation is bitwise what the timeline gives: messages
  // that queue on a port, replicas that meet at an all-reduce.
  for (Scenario s : {twoStages("gpipe", 4, 3000, 1000, 0.5), twoStages("1f1b", 6, 2000, 1000, 0, 3)}) {
    const CostModel costs(s.graph, s.cluster, s.plan);
    const schedule::Program program = plan::programForPlan(s.plan, costs.dag(), 2);
    const trace::Timeline timeline = simulate(program, costs);
    const Totals totals = simulateTotals(program, costs);
    EXPECT_EQ(totals.makespan, timeline.makespan());
    ASSERT_EQ(totals.busy.size(), static_cast<std::size_t>(timeline.numRanks()));
    for (int r = 0; r < timeline.numRanks(); ++r) EXPECT_EQ(totals.busy[r], timeline.busySeconds(r)) << "rank " << r;
    std::vector<double> wire(s.cluster.numPorts(), 0.0);
    for (const trace::Transfer& x : timeline.transfers) {
      const cluster::Route route = costs.route(x.from_rank, x.to_rank);
      if (route.send_port >= 0) wire[route.send_port] += x.bytes / route.bandwidth;
      if (route.recv_port >= 0) wire[route.recv_port] += x.bytes / route.bandwidth;
    }
    EXPECT_EQ(totals.port_wire, wire);
    EXPECT_GT(*std::max_element(wire.begin(), wire.end()), 0.0);
  }
}

TEST(Simulator, AProgramThatStallsIsRefusedNotTimedShort) {
  // The planner validates one of a plan's Programs and simulates the rest unchecked:
  // one whose ranks wait on each other must not come back as a short iteration.
  Scenario s = twoStages("1f1b", 1, 1000, 1e9, 0);
  const CostModel costs(s.graph, s.cluster, s.plan);
  schedule::Program program = plan::programForPlan(s.plan, costs.dag(), 1);
  // Rank 0 now waits for the gradient before it sends the activation.
  auto& first = program.ranks[0];
  const auto is = [](schedule::ActionType t) { return [t](const schedule::Action& a) { return a.type == t; }; };
  const auto send = std::find_if(first.begin(), first.end(), is(schedule::ActionType::SEND_F));
  const auto recv = std::find_if(first.begin(), first.end(), is(schedule::ActionType::RECV_B));
  ASSERT_TRUE(send != first.end() && recv != first.end() && send < recv);
  std::iter_swap(send, recv);
  try {
    simulate(program, costs);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stalls: rank"), std::string::npos) << e.what();
  }
}

TEST(Simulator, MessagesSharingAPortQueue) {
  // GPipe, m=2: both activations leave rank 0 at t=1 and t=2, each needs 3 s on the wire.
  Scenario s = twoStages("gpipe", 2, 3000, 1000, 0);
  const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  const auto& rank1 = e.timeline.ranks[1];
  ASSERT_GE(rank1.size(), 2u);
  EXPECT_NEAR(rank1[0].start, 4, 1e-9);  // first message 1 -> 4
  EXPECT_NEAR(rank1[1].start, 7, 1e-9);  // second waits for the port: 4 -> 7
}

TEST(Simulator, ReplicasMeetAtAllReduce) {
  Scenario s = twoStages("1f1b", 4, 0, 1e9, 0, 2);
  s.graph = graph::LayerGraph::uniformChain(2, 1.0, 1.0, 0.0, 0, 4000);  // params to all-reduce
  const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  double end0 = -1, end1 = -2;
  for (const auto& t : e.timeline.ranks[0])
    if (t.action.type == schedule::ActionType::ALLREDUCE) end0 = t.end;
  for (const auto& t : e.timeline.ranks[1])
    if (t.action.type == schedule::ActionType::ALLREDUCE) end1 = t.end;
  EXPECT_NEAR(end0, end1, 1e-12);
  const CostModel costs(s.graph, s.cluster, s.plan);
  EXPECT_NEAR(costs.allreduceSeconds(0), 2.0 * 1 / 2 * 4000 / 1e9, 1e-15);
}

// Replicas whose compute wanders meet when the last arrives: each leaves its all-reduce
// later by the expected maximum of two draws (1/sqrt(pi) standard deviations) of a
// tenth of the compute it ran before.
TEST(Simulator, ReplicasWaitForTheLastToArrive) {
  Scenario s = twoStages("1f1b", 4, 0, 1e9, 0, 2);
  s.graph = graph::LayerGraph::uniformChain(2, 1.0, 1.0, 0.0, 0, 4000);
  const auto allreduceEnd = [](const Evaluation& e, int rank) {
    for (const auto& t : e.timeline.ranks[rank])
      if (t.action.type == schedule::ActionType::ALLREDUCE) return t.end;
    return -1.0;
  };
  const Evaluation steady = evaluatePlan(s.graph, s.cluster, s.plan);
  double computed = 0;  // rank 0's, before its all-reduce
  for (const auto& t : steady.timeline.ranks[0])
    if (t.action.type == schedule::ActionType::F || t.action.type == schedule::ActionType::B)
      computed += t.end - t.start;
  ASSERT_GT(computed, 0);
  std::vector<cluster::Device> devices = s.cluster.devices();
  for (cluster::Device& d : devices) d.compute_jitter = 0.1;
  s.cluster = cluster::ClusterSpec(devices, s.cluster.levels(), s.cluster.links(), "wandering");
  EXPECT_NEAR(CostModel(s.graph, s.cluster, s.plan).meetingWaitShare(0), 0.1 / std::sqrt(M_PI), 1e-9);
  EXPECT_EQ(CostModel(s.graph, s.cluster, s.plan).meetingWaitShare(1), 0);  // one replica: no meeting
  const Evaluation wandering = evaluatePlan(s.graph, s.cluster, s.plan);
  for (int r : {0, 1})
    EXPECT_NEAR(allreduceEnd(wandering, r) - allreduceEnd(steady, r), 0.1 / std::sqrt(M_PI) * computed, 1e-9) << r;
}

TEST(ExpectedMaxOfNormals, IsTheMeanOfTheLargestDraw) {
  EXPECT_EQ(expectedMaxOfNormals(1), 0);
  EXPECT_NEAR(expectedMaxOfNormals(2), 1 / std::sqrt(M_PI), 1e-6);
  EXPECT_NEAR(expectedMaxOfNormals(3), 1.5 / std::sqrt(M_PI), 1e-6);  // 3 / (2 sqrt(pi))
  EXPECT_NEAR(expectedMaxOfNormals(4), 1.029375, 1e-5);
  EXPECT_NEAR(expectedMaxOfNormals(100), 2.5076, 1e-3);
  EXPECT_NEAR(expectedMaxOfNormals(1000), 3.241, 1e-3);  // beyond the table
}

TEST(Simulator, AllReducePricedAtItsOwnRateAndMessagesAtTheBandwidth) {
  // Gloo on CPU hosts: messages at 1 GB/s, the all-reduce's ring traffic at 0.25 GB/s.
  Scenario s = twoStages("1f1b", 4, 1e6, 1e9, 0, 2);
  s.graph = graph::LayerGraph::uniformChain(2, 1.0, 1.0, 0.0, 1000000, 4000);
  cluster::Level level{"host", 3, 1e9, 0.0};
  level.allreduce_bandwidth = 0.25e9;
  s.cluster = cluster::ClusterSpec(s.cluster.devices(), {level}, {});
  const CostModel costs(s.graph, s.cluster, s.plan);
  EXPECT_NEAR(costs.allreduceSeconds(0), 2.0 * 1 / 2 * 4000 / 0.25e9, 1e-15);
  const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  ASSERT_FALSE(e.timeline.transfers.empty());
  const auto& t = e.timeline.transfers.front();
  EXPECT_NEAR(t.end - t.start, 1e6 / 1e9, 1e-12);
}

TEST(Simulator, AllReduceOnTheHostsCpusComesAfterTheBackwardPass) {
  // The all-reduce's 500 bytes take 0.5 s on the wire, hidden by the 1 s backward pass;
  // but each replica's CPU moves its 500 bytes at 250 B/s: 2 s of the core after the pass.
  Scenario s = twoStages("1f1b", 4, 0, 1000, 0, 2);
  s.graph = graph::LayerGraph::uniformChain(2, 1.0, 1.0, 0.0, 0, 500);
  cluster::Level level{"host", 3, 1000, 0.0};
  level.allreduce_host_bandwidth = 250;
  s.cluster = cluster::ClusterSpec(s.cluster.devices(), {level}, {});
  const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  bool seen = false;
  for (const auto& t : e.timeline.ranks[0])
    if (t.action.type == schedule::ActionType::ALLREDUCE) {
      EXPECT_NEAR(t.end - t.start, 2.0, 1e-9);
      seen = true;
    }
  EXPECT_TRUE(seen);
  EXPECT_NEAR(CostModel(s.graph, s.cluster, s.plan).allreduceHostSeconds(0), 2.0, 1e-12);
}

// When the last replica began its last backward pass of the mini-batch, on stage 0.
double lastBackwardStart(const Evaluation& e) {
  double start = 0;
  for (int r : {0, 1})
    for (const auto& t : e.timeline.ranks[r])
      if (t.action.type == schedule::ActionType::B) start = std::max(start, t.start);
  return start;
}

TEST(Simulator, AllReduceOverlapsTheLastBackwardPassFromItsFirstFullBucket) {
  Scenario s = twoStages("1f1b", 4, 0, 1000, 0, 2);
  // Two replicas: the ring moves 2(n-1)/n = 1 x the weights. 3000 bytes are one bucket,
  // full only when the backward pass (1 s) ends: the 3 s of the ring all show after it.
  s.graph = graph::LayerGraph::uniformChain(2, 1.0, 1.0, 0.0, 0, 3000);
  Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  for (const auto& t : e.timeline.ranks[0])
    if (t.action.type == schedule::ActionType::ALLREDUCE) {
      EXPECT_NEAR(t.end, lastBackwardStart(e) + 1 + 3, 1e-9);
    }
  // Four buckets (16 MiB): the first is full a quarter into the pass, and the ring runs
  // from there.
  const double bytes = 4.0 * sim::kGradientBucketBytes;
  s.graph = graph::LayerGraph::uniformChain(2, 1.0, 1.0, 0.0, 0, static_cast<int64_t>(bytes));
  e = evaluatePlan(s.graph, s.cluster, s.plan);
  for (const auto& t : e.timeline.ranks[0])
    if (t.action.type == schedule::ActionType::ALLREDUCE) {
      EXPECT_NEAR(t.end, lastBackwardStart(e) + 0.25 + bytes / 1000, 1e-6);
    }
}

TEST(Simulator, OptimizerStepsTakeTheirProfiledTime) {
  Scenario s = twoStages("gpipe", 2, 0, 1e9, 0);
  std::vector<graph::Layer> layers = s.graph.layers();
  layers[1].optimizer_seconds = 0.5;
  s.graph = graph::LayerGraph(layers, 1);
  const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  for (int r : {0, 1})
    for (const auto& t : e.timeline.ranks[r])
      if (t.action.type == schedule::ActionType::STEP) {
        EXPECT_NEAR(t.end - t.start, r == 1 ? 0.5 : 0.0, 1e-12);
      }
}

// One rank under 1F1B: two layers of F 1 s and B 1 s, four micro-batches.
Scenario oneRank() {
  plan::ScheduleOptions schedule;
  schedule.name = "1f1b";
  Scenario alone{graph::LayerGraph::uniformChain(2, 1.0, 1.0, 0.0), cluster::ClusterSpec::uniform(1, 1 << 30, 1e9, 0),
                 plan::chainPlan({"layer0", "layer1"}, {0, 2}, {}, schedule, 1, 4)};
  alone.plan.stages[0].devices = {alone.cluster.device(0).name};
  return alone;
}

// The runtime's own time around each action (cluster::Device::action_overhead) holds
// back each next action of its rank: a rank that never waits ends later by its count of
// actions times it; a rank whose actions wait for messages anyway hides it there.
TEST(Simulator, EachActionWaitsForTheRuntimesOwnTimeAroundTheLast) {
  Scenario alone = oneRank();
  const double plain = evaluatePlan(alone.graph, alone.cluster, alone.plan).report.makespan;
  const double o = 0.125;
  std::vector<cluster::Device> devices = alone.cluster.devices();
  devices[0].action_overhead = o;
  alone.cluster = cluster::ClusterSpec(devices, alone.cluster.levels(), alone.cluster.links(), "overhead");
  const CostModel costs(alone.graph, alone.cluster, alone.plan);
  const auto actions = static_cast<double>(plan::programForPlan(alone.plan, costs.dag(), 1).ranks[0].size());
  EXPECT_NEAR(evaluatePlan(alone.graph, alone.cluster, alone.plan).report.makespan, plain + actions * o, 1e-9);

  // Two stages, 1F1B, one micro-batch, 10 s on the wire each way: each rank's RECV is
  // ready long before its message arrives, and the wait hides the overheads before it.
  // The critical path pays 7: F0 and SEND_F on rank 0; F1, B1 and SEND_B on rank 1 after
  // its receive; B0 and STEP on rank 0 after its receive.
  Scenario two = twoStages("1f1b", 1, 1000, 100, 0);
  const double slow = evaluatePlan(two.graph, two.cluster, two.plan).report.makespan;
  devices = two.cluster.devices();
  for (auto& d : devices) d.action_overhead = 1e-3;
  two.cluster = cluster::ClusterSpec(devices, two.cluster.levels(), two.cluster.links(), "overhead");
  EXPECT_NEAR(evaluatePlan(two.graph, two.cluster, two.plan).report.makespan, slow + 7e-3, 1e-9);
}

// The part of the runtime's own time that grows with the action: one rank, its F and B
// one after another, each action waits a tenth of the compute that just ended (the last,
// a STEP of no time, after the last B too).
TEST(Simulator, PartOfTheRuntimesOwnTimeGrowsWithTheComputeJustEnded) {
  Scenario alone = oneRank();
  const double plain = evaluatePlan(alone.graph, alone.cluster, alone.plan).report.makespan;
  std::vector<cluster::Device> devices = alone.cluster.devices();
  devices[0].action_overhead_share = 0.1;
  alone.cluster = cluster::ClusterSpec(devices, alone.cluster.levels(), alone.cluster.links(), "share");
  EXPECT_NEAR(evaluatePlan(alone.graph, alone.cluster, alone.plan).report.makespan, plain * 1.1, 1e-9);
}

// A split schedule's W runs the layer's parameters-only backward (split_weight_seconds);
// a whole backward pass stays I + W.
TEST(Simulator, SplitWeightPassesTakeTheirOwnTime) {
  for (const std::string schedule : {"zb-h1", "1f1b"}) {
    Scenario s = twoStages(schedule, 2, 0, 1e9, 0);
    std::vector<graph::Layer> layers = s.graph.layers();
    for (graph::Layer& l : layers) {
      l.backward_weight_seconds = 0.5;
      l.split_weight_seconds = 0.75;
    }
    s.graph = graph::LayerGraph(layers, 1);
    const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
    int passes = 0;
    for (const auto& rank : e.timeline.ranks)
      for (const auto& t : rank) {
        const schedule::ActionType type = t.action.type;
        if (type == schedule::ActionType::W) {
          EXPECT_NEAR(t.end - t.start, 0.75, 1e-12);
        }
        if (type == schedule::ActionType::B) {
          EXPECT_NEAR(t.end - t.start, 1.5, 1e-12);
        }
        passes += type == schedule::ActionType::W || type == schedule::ActionType::B;
      }
    EXPECT_EQ(passes, 4) << schedule;
  }
}

// The same scenario with its devices sharing `cores` cores.
Scenario onSharedCores(Scenario s, int cores) {
  std::vector<std::string> names;
  for (const auto& d : s.cluster.devices()) names.push_back(d.name);
  s.cluster = cluster::ClusterSpec(s.cluster.devices(), s.cluster.levels(), s.cluster.links(), "shared",
                                   {{names, cores}});
  return s;
}

trace::Timeline simulateOnce(const Scenario& s) {
  const CostModel costs(s.graph, s.cluster, s.plan);
  return simulate(plan::programForPlan(s.plan, costs.dag(), 1), costs);
}

// The same scenario with a host cost on its level: `overhead` seconds per message and
// `copy_bandwidth` bytes/s on each side.
Scenario withHostCost(Scenario s, double overhead, double copy_bandwidth) {
  std::vector<cluster::Level> levels = s.cluster.levels();
  for (auto& l : levels) l.host = {overhead, copy_bandwidth};
  s.cluster = cluster::ClusterSpec(s.cluster.devices(), levels, s.cluster.links(), "host cost",
                                   s.cluster.sharedCores());
  return s;
}

TEST(Simulator, MessagesTakeHostTimeAtBothEnds) {
  // As TransfersAddLatencyAndWireTime, and each of the 4 message ends costs its rank
  // h = 0.5 + 1000 / 4000 = 0.75 s: the activation leaves rank 0 at 1 + h and is taken
  // in by rank 1 until 1 + h + c + h; the gradient likewise; B on rank 0 ends 4h later.
  const double c = 2.25, h = 0.75;
  const Scenario s = withHostCost(twoStages("1f1b", 1, 1000, 500, 0.25), 0.5, 4000);
  const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  EXPECT_NEAR(e.report.makespan, 4 + 2 * c + 4 * h, 1e-9);
  ASSERT_EQ(e.timeline.transfers.size(), 2u);
  EXPECT_NEAR(e.timeline.transfers[0].start, 1 + h, 1e-9);
  EXPECT_NEAR(e.timeline.ranks[1][0].start, 1 + h + c + h, 1e-9);  // F on rank 1
  for (const auto& rank : e.timeline.ranks)  // host time is not an action of the timeline
    for (const auto& t : rank) EXPECT_FALSE(schedule::isComm(t.action.type)) << schedule::name(t.action.type);

  // On one shared core, host time and compute share it like any two jobs: the work is
  // the same 4 s of compute plus 4h, and no second core makes any of it overlap.
  const trace::Timeline shared = simulateOnce(onSharedCores(s, 1));
  EXPECT_NEAR(shared.makespan(), 4 + 2 * c + 4 * h, 1e-9);
}

// Through host memory, each end copies the message over its own device's host link: as
// MessagesTakeHostTimeAtBothEnds, with h = 1000 bytes / 2000 on rank 0's end and
// 1000 / 4000 on rank 1's.
TEST(Simulator, CopiesThroughHostMemoryTakeEachEndsLink) {
  const double c = 2.25;
  Scenario s = twoStages("1f1b", 1, 1000, 500, 0.25);
  std::vector<cluster::Device> devices = s.cluster.devices();
  devices[0].host_link_bandwidth = 2000;
  devices[1].host_link_bandwidth = 4000;
  std::vector<cluster::Level> levels = s.cluster.levels();
  for (auto& l : levels) l.through_host = true;
  s.cluster = cluster::ClusterSpec(devices, levels, s.cluster.links(), "through host");
  const Evaluation e = evaluatePlan(s.graph, s.cluster, s.plan);
  const double h0 = 0.5, h1 = 0.25;
  EXPECT_NEAR(e.report.makespan, 4 + 2 * c + 2 * h0 + 2 * h1, 1e-9);
  EXPECT_NEAR(e.timeline.transfers[0].start, 1 + h0, 1e-9);
  EXPECT_NEAR(e.timeline.ranks[1][0].start, 1 + h0 + c + h1, 1e-9);
}

TEST(Simulator, RanksSharingOneCoreComputeAtHalfSpeedWhileBothCompute) {
  // GPipe, 2 micro-batches, F = B = 1 s, free messages, both ranks on one core. Rank 0
  // runs F(0) alone in [0, 1]; then its F(1) and rank 1's F(0) share the core and both
  // end at 3. The core is never idle afterwards, so the 8 s of work end at 8 (6 s on
  // two cores).
  const Scenario alone = twoStages("gpipe", 2, 0, std::numeric_limits<double>::infinity(), 0);
  EXPECT_NEAR(simulateOnce(alone).makespan(), 6, 1e-9);
  const trace::Timeline t = simulateOnce(onSharedCores(alone, 1));
  EXPECT_NEAR(t.makespan(), 8, 1e-9);
  const auto& first = t.ranks[0][0];
  EXPECT_EQ(first.action.type, schedule::ActionType::F);
  EXPECT_NEAR(first.end - first.start, 1, 1e-9);
  for (const auto* timed : {&t.ranks[0][1], &t.ranks[1][0]}) {
    ASSERT_EQ(timed->action.type, schedule::ActionType::F);
    EXPECT_NEAR(timed->start, 1, 1e-9);
    EXPECT_NEAR(timed->end, 3, 1e-9);
  }
}

TEST(Simulator, EnoughSharedCoresChangeNothing) {
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"}) {
    const Scenario alone = twoStages(schedule, 4, 100, 1000, 0.01, 2);
    const trace::Timeline a = simulateOnce(alone), b = simulateOnce(onSharedCores(alone, 3));
    ASSERT_EQ(a.ranks.size(), b.ranks.size());
    for (std::size_t r = 0; r < a.ranks.size(); ++r) {
      ASSERT_EQ(a.ranks[r].size(), b.ranks[r].size());
      for (std::size_t i = 0; i < a.ranks[r].size(); ++i) {
        EXPECT_EQ(a.ranks[r][i].start, b.ranks[r][i].start) << schedule;
        EXPECT_EQ(a.ranks[r][i].end, b.ranks[r][i].end) << schedule;
      }
    }
  }
}

// Three ranks on two cores, any schedule: no work is lost or made up. The mini-batch
// takes at least its work over the two cores and at least as long as on three, and a
// rank computing alone computes at full speed.
TEST(Simulator, SharedCoresConserveWork) {
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
    plan::ScheduleOptions options;
    options.name = schedule;
    auto u = uniformScenario(options, 3, 6, 1, 2, 0);
    const Scenario alone{u.graph, u.cluster, u.plan};
    const trace::Timeline free = simulateOnce(alone), shared = simulateOnce(onSharedCores(alone, 2));
    double work = 0;
    for (int r = 0; r < free.numRanks(); ++r) work += free.busySeconds(r);
    EXPECT_GE(shared.makespan(), free.makespan() - 1e-9) << schedule;
    EXPECT_GE(shared.makespan(), work / 2 - 1e-9) << schedule;
    EXPECT_LE(shared.makespan(), work + 1e-9) << schedule;
    // Rank 0's first action runs alone.
    EXPECT_NEAR(shared.ranks[0][0].end - shared.ranks[0][0].start, free.ranks[0][0].end - free.ranks[0][0].start,
                1e-9)
        << schedule;
  }
}

// Three replicas of one stage on two cores: ranks 0 and 2 share core 0, rank 1 has
// core 1 to itself, so it does its two micro-batches in half the time.
TEST(Simulator, RanksGoOntoSharedCoresRoundRobin) {
  Scenario s{graph::LayerGraph::uniformChain(1, 1.0, 1.0, 0.0, 0, 0),
             cluster::ClusterSpec::uniform(3, int64_t{1} << 40, 1e9, 0), plan::Plan{}};
  s.plan.microbatches = 6;
  s.plan.schedule.name = "1f1b";
  s.plan.stages = {{{"layer0"}, {"dev0", "dev1", "dev2"}}};
  const trace::Timeline t = simulateOnce(onSharedCores(s, 2));
  auto lastComputeEnd = [&](int r) {
    double end = 0;
    for (const auto& timed : t.ranks[r])
      if (timed.action.type == schedule::ActionType::B) end = timed.end;
    return end;
  };
  EXPECT_NEAR(lastComputeEnd(1), 4, 1e-9);
  EXPECT_NEAR(lastComputeEnd(0), 8, 1e-9);
  EXPECT_NEAR(lastComputeEnd(2), 8, 1e-9);
}

TEST(Simulator, LargePipelineSimulates) {
  plan::ScheduleOptions options;
  auto u = uniformScenario(options, 64, 1024, 1, 2, 0);
  const CostModel costs(u.graph, u.cluster, u.plan);
  const schedule::Program program = plan::programForPlan(u.plan, costs.dag(), 1);
  const trace::Timeline t = simulate(program, costs);
  EXPECT_NEAR(t.makespan(), (1024 + 63) * 3.0, 1e-6);
}

}  // namespace
}  // namespace pipetrain::sim
