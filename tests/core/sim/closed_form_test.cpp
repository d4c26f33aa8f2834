// The simulator against closed forms: equal stage times, free communication.
#include <gtest/gtest.h>

#include "pipetrain/sim/evaluate.h"

namespace pipetrain::sim {
namespace {

Report uniform(const std::string& name, int p, int m, double f, double b, double w = 0, int chunks = 1,
               int minibatches = 1) {
  plan::ScheduleOptions options;
  options.name = name;
  options.chunks = chunks;
  auto u = uniformScenario(options, p, m, f, b, w);
  return evaluatePlan(u.graph, u.cluster, u.plan, minibatches).report;
}

TEST(ClosedForm, GPipeAndOneFOneBIterationAndBubble) {
  for (const std::string name : {"gpipe", "1f1b"})
    for (int p : {1, 2, 4, 8})
      for (int m : {1, 3, 8, 16}) {
        SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        const double tf = 1.0, tb = 2.0;
        const Report r = uniform(name, p, m, tf, tb);
        EXPECT_NEAR(r.iteration_time, (m + p - 1) * (tf + tb), 1e-9);
        EXPECT_NEAR(r.bubble_fraction, (p - 1.0) / (m + p - 1), 1e-9);
        EXPECT_NEAR(r.throughput, m / r.iteration_time, 1e-9);
      }
}

TEST(ClosedForm, PeakActivations) {
  const int p = 4;
  for (int m : {2, 8}) {
    const Report one = uniform("1f1b", p, m, 1, 2);
    const Report gpipe = uniform("gpipe", p, m, 1, 2);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(one.ranks[r].peak_activations, std::min(p - r, m));
      EXPECT_EQ(gpipe.ranks[r].peak_activations, m);
    }
  }
}

TEST(ClosedForm, WeightVersions) {
  const int p = 4, m = 8;
  const Report pipedream = uniform("pipedream", p, m, 1, 2);
  for (int r = 0; r < p; ++r) EXPECT_EQ(pipedream.ranks[r].weight_versions, p - r);
  for (const auto& rank : uniform("2bw", p, m, 1, 2).ranks) EXPECT_EQ(rank.weight_versions, 2);
  for (const auto& rank : uniform("pipemare", p, m, 1, 2).ranks) EXPECT_EQ(rank.weight_versions, 1);
}

TEST(ClosedForm, AsynchronousSchedulesHaveNoSteadyStateBubble) {
  for (const std::string name : {"pipedream", "2bw", "pipemare"}) {
    const Report r = uniform(name, 4, 8, 1, 2);
    EXPECT_NEAR(r.iteration_time, 8 * 3.0, 1e-9) << name;
    EXPECT_NEAR(r.bubble_fraction, 0.0, 1e-9) << name;
  }
}

TEST(ClosedForm, ZeroBubbleH1BeatsOneFOneBWhenWeightGradientsCost) {
  for (int p : {2, 4, 8}) {
    const int m = 2 * p;
    const double tf = 1, tb = 2, tw = 1;  // I = 1
    const Report zb = uniform("zb-h1", p, m, tf, tb, tw);
    const Report one = uniform("1f1b", p, m, tf, tb);
    EXPECT_LT(zb.bubble_fraction, one.bubble_fraction) << "p=" << p;
    // ZB-H1 paper: bubble (p-1)(T_F + T_I - T_W), a third of 1F1B's when all are equal.
    EXPECT_NEAR(zb.iteration_time, m * (tf + tb) + (p - 1) * (tf + (tb - tw) - tw), 1e-9) << "p=" << p;
  }
  // Without a weight-gradient part there is nothing to defer.
  EXPECT_NEAR(uniform("zb-h1", 4, 8, 1, 2, 0).iteration_time, uniform("1f1b", 4, 8, 1, 2).iteration_time, 1e-9);
}

TEST(ClosedForm, InterleavedBubbleShrinksByChunks) {
  for (int v : {2, 4}) {
    const int p = 4, m = 8;
    const double ideal = m * 3.0;
    const Report r = uniform("interleaved", p, m, 1, 2, 0, v);
    EXPECT_NEAR((r.iteration_time - ideal) / ideal, (p - 1.0) / (v * m), 1e-9) << "v=" << v;
  }
}

TEST(ClosedForm, ZeroBubbleH2HasNoBubbleAtTwicePMinusOneActivations) {
  // The ZB paper: with T_F = T_I = T_W and m >= 2p-1, ZB-H2 has no bubble, holding up to
  // 2p-1 micro-batches of activations (1F1B's first stage holds p).
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p - 1, 2 * p, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Report r = uniform("zb-h2", p, m, 1, 2, 1);
      EXPECT_NEAR(r.iteration_time, m * 3.0, 1e-9);
      EXPECT_NEAR(r.bubble_fraction, 0.0, 1e-9);
      EXPECT_EQ(r.ranks[0].peak_activations, 2 * p - 1);
      for (const auto& rank : r.ranks) EXPECT_LE(rank.peak_activations, 2 * p - 1);
    }
}

TEST(ClosedForm, ZeroBubbleVHasNoBubbleAtOneFOneBActivations) {
  // The ZB paper's ZB-V: two stages per rank in a V; with T_F = T_I = T_W no bubble, at
  // the activation memory of 1F1B's first stage (p micro-batches of a rank's layers).
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Report r = uniform("zb-v", p, m, 1, 2, 1);
      EXPECT_NEAR(r.iteration_time, m * 3.0, 1e-9);
      EXPECT_NEAR(r.bubble_fraction, 0.0, 1e-9);
      const Report one = uniform("1f1b", p, m, 1, 2);
      for (const auto& rank : r.ranks) EXPECT_EQ(rank.peak_activations, one.ranks[0].peak_activations);
    }
}

TEST(ClosedForm, DualPipeVBubbleIsDeepSeeksOverItsStages) {
  // DeepSeek publishes DualPipe's bubble as (PP/2 - 1)(F&B + B - 3W) in chunk times.
  // DualPipeV is DualPipe cut in half: on p ranks it runs PP = 2p stages, and with a pair
  // taking all of F + B ours pays exactly (2p/2 - 1)(F&B + B - 3W). Activations: p + 1/2
  // micro-batches of a rank's layers (DeepSeek: p + 1).
  auto dualPipeV = [](int p, int m, double overlap_factor) {
    plan::ScheduleOptions options;
    options.name = "dualpipev";
    auto u = uniformScenario(options, p, m, 1, 2, 1);
    u.graph.setOverlapFactor(overlap_factor);
    return evaluatePlan(u.graph, u.cluster, u.plan).report;
  };
  const double f = 0.5, b = 1.0, w = 0.5;  // per chunk: half of a rank's F = 1, B = 2, W = 1
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Report r = dualPipeV(p, m, 1.0);
      EXPECT_NEAR(r.iteration_time, m * 3.0 + (p - 1) * ((f + b) + b - 3 * w), 1e-9);
      for (const auto& rank : r.ranks) EXPECT_EQ(rank.peak_activations, p + 0.5);
      // Overlap the device can exploit shortens every pair, and so the iteration.
      const Report overlapped = dualPipeV(p, m, 0.8);
      EXPECT_LT(overlapped.iteration_time, r.iteration_time - 1e-9);
      for (const auto& rank : overlapped.ranks) EXPECT_LE(rank.busy_seconds, overlapped.iteration_time + 1e-9);
    }
}

// p equal stages, each on `replicas` devices: every replica group is a pipeline over
// m / replicas micro-batches, so the closed forms hold with m' = m / replicas.
Report replicated(const std::string& name, int p, int m, int replicas) {
  plan::ScheduleOptions options;
  options.name = name;
  auto u = uniformScenario(options, p * replicas, m, 1, 2, 0);
  u.graph = graph::LayerGraph::uniformChain(p, 1, 2, 0);
  u.plan.stages.clear();
  for (int s = 0; s < p; ++s) {
    plan::Stage st{{u.graph.layer(s).name}, {}};
    for (int k = 0; k < replicas; ++k) st.devices.push_back(u.cluster.device(s * replicas + k).name);
    u.plan.stages.push_back(st);
  }
  return evaluatePlan(u.graph, u.cluster, u.plan, 2).report;
}

TEST(ClosedForm, ReplicatedStagesDivideTheMicrobatches) {
  const int p = 4, m = 16;
  for (int c : {1, 2, 4}) {
    SCOPED_TRACE("replicas " + std::to_string(c));
    const int own = m / c;
    for (const std::string name : {"gpipe", "1f1b"}) {
      const Report r = replicated(name, p, m, c);
      EXPECT_NEAR(r.iteration_time, (own + p - 1) * 3.0, 1e-9) << name;
      EXPECT_NEAR(r.bubble_fraction, (p - 1.0) / (own + p - 1), 1e-9) << name;
    }
    for (const std::string name : {"pipedream", "2bw", "pipemare"}) {
      const Report r = replicated(name, p, m, c);
      EXPECT_NEAR(r.iteration_time, own * 3.0, 1e-9) << name;
      EXPECT_NEAR(r.bubble_fraction, 0.0, 1e-9) << name;
    }
    const Report pipedream = replicated("pipedream", p, m, c);
    for (int r = 0; r < p * c; ++r) EXPECT_EQ(pipedream.ranks[r].weight_versions, p - r / c) << "rank " << r;
  }
}

TEST(ClosedForm, OneSteadyStateWhateverTraceIsAsked) {
  // The report does not depend on how many mini-batches the returned trace holds, for
  // flushing and streaming schedules alike (the planner and `simulate` ask differently).
  for (const std::string name : {"1f1b", "pipedream", "2bw", "pipemare", "zb-v"}) {
    const Report one = uniform(name, 4, 8, 1, 2, 1, 1, 1);
    for (int k : {2, 3, 5}) {
      const Report more = uniform(name, 4, 8, 1, 2, 1, 1, k);
      EXPECT_NEAR(more.iteration_time, one.iteration_time, 1e-9) << name << " k=" << k;
      EXPECT_NEAR(more.bubble_fraction, one.bubble_fraction, 1e-9) << name << " k=" << k;
    }
  }
}

TEST(ClosedForm, FlushingSchedulesRepeatExactlyPerMinibatch) {
  const Report one = uniform("1f1b", 4, 8, 1, 2, 0, 1, 1);
  const Report three = uniform("1f1b", 4, 8, 1, 2, 0, 1, 3);
  EXPECT_NEAR(one.iteration_time, three.iteration_time, 1e-9);
  EXPECT_NEAR(three.makespan, 3 * one.makespan, 1e-9);
}

}  // namespace
}  // namespace pipetrain::sim
